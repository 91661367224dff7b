package stack

import (
	"fmt"

	"github.com/sfnlimit/sfnlimit/internal/tools/cfntemplate"
	"github.com/sfnlimit/sfnlimit/internal/tools/iampolicy"
)

// roleEnforcer checks each call of a function against its role in template.yaml, as AWS would
// (internal/tools/iampolicy; docs/emulators.md, "IAM": moto and fauxqs do not). The role's policies
// are resolved with the stack's resources; resources the stack does not create (log groups) get
// placeholder ARNs that nothing the functions call can match.
func (s *Stack) roleEnforcer(functionID string) (*iampolicy.Enforcer, error) {
	res, err := s.tpl.Resolver(cfntemplate.Env{Parameters: s.opts.Parameters, Attr: func(id, attribute string) (string, bool) {
		if v, ok := s.attrs.Lookup(id, attribute); ok {
			return v, true
		}
		return fmt.Sprintf("arn:aws:notlocal:%s:%s:%s/%s", Region, Account, id, attribute), true
	}})
	if err != nil {
		return nil, err
	}
	docs, err := res.Policies(functionID)
	if err != nil {
		return nil, fmt.Errorf("role of %s: %w", functionID, err)
	}
	e := &iampolicy.Enforcer{Principal: functionID + "'s role", Account: iampolicy.Account{Partition: "aws", Region: Region, ID: Account}}
	for _, d := range docs {
		p, err := iampolicy.Parse(d.Name, d.Document)
		if err != nil {
			return nil, err
		}
		e.Policies = append(e.Policies, p)
	}
	tb, err := s.tpl.Table()
	if err != nil {
		return nil, err
	}
	for _, k := range tb.KeySchema {
		if k.KeyType == "HASH" {
			e.Account.PartitionKey = k.AttributeName
		}
	}
	return e, nil
}
