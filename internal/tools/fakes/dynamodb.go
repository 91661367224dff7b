package fakes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sfnlimit/sfnlimit/internal/tools/ddbexpr"
)

// DynamoDB is one in-memory table with string keys pk and sk. It evaluates condition expressions
// by DynamoDB's rules for the part of the grammar package ddbexpr parses (comparisons, the
// attribute_exists, attribute_not_exists and begins_with functions, AND, OR, NOT, parentheses),
// which covers every condition lease.Store, waitroom.Store and batch.Ledger write and each of them
// with a clause removed (the mutation check, internal/tools/mutate), and refuses any other with an
// error, so an expression cannot be evaluated by a rule it does not follow. Like DynamoDB it
// refuses an undefined placeholder; unlike DynamoDB it does not refuse an unused one (the mutation
// check leaves the removed clause's value in place). It understands only the key conditions
// "pk = :pk" and "pk = :pk AND begins_with(sk, :sk)" and the filter "begins_with(pk, :p)". Query and Scan return
// PageSize items a page (all when 0), Scan applying its filter after the page is cut, as DynamoDB
// does. TransactWriteItems takes Put actions only.
type DynamoDB struct {
	Table    string
	PageSize int
	// OnCall runs first in every call with the operation's name ("GetItem", "PutItem", ...); a non-nil
	// error is returned.
	OnCall func(op string) error

	mu    sync.Mutex
	items map[[2]string]map[string]types.AttributeValue
}

// NewDynamoDB returns an empty table.
func NewDynamoDB(table string) *DynamoDB {
	return &DynamoDB{Table: table, items: map[[2]string]map[string]types.AttributeValue{}}
}

func (d *DynamoDB) begin(op string, table *string) error {
	if d.OnCall != nil {
		if err := d.OnCall(op); err != nil {
			return err
		}
	}
	if aws.ToString(table) != d.Table {
		return &types.ResourceNotFoundException{Message: aws.String("Requested resource not found: table " + aws.ToString(table))}
	}
	return nil
}

func str(item map[string]types.AttributeValue, name string) (string, bool) {
	v, ok := item[name].(*types.AttributeValueMemberS)
	if !ok {
		return "", false
	}
	return v.Value, true
}

func keyOf(item map[string]types.AttributeValue) ([2]string, error) {
	pk, ok1 := str(item, "pk")
	sk, ok2 := str(item, "sk")
	if !ok1 || !ok2 || pk == "" || sk == "" {
		return [2]string{}, fmt.Errorf("fakes: item key must have string pk and sk, got %v", item)
	}
	return [2]string{pk, sk}, nil
}

func validation(msg string) error {
	return APIError("ValidationException", msg)
}

// check evaluates a condition against the stored item (nil when absent), by DynamoDB's rules for
// the part of its grammar ddbexpr parses; any other expression is refused with an error.
func check(cond *string, names map[string]string, values map[string]types.AttributeValue, cur map[string]types.AttributeValue) error {
	if cond == nil {
		return nil
	}
	n, err := ddbexpr.Parse(*cond)
	if err != nil {
		return fmt.Errorf("fakes: %w (not supported)", err)
	}
	ok, err := ddbexpr.Eval(n, ddbexpr.Env{Item: cur, Names: names, Values: values})
	if err != nil {
		return validation(err.Error())
	}
	if !ok {
		return &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed")}
	}
	return nil
}

// GetItem returns the item with the key, if any.
func (d *DynamoDB) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if err := d.begin("GetItem", in.TableName); err != nil {
		return nil, err
	}
	k, err := keyOf(in.Key)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return &dynamodb.GetItemOutput{Item: maps.Clone(d.items[k])}, nil
}

// PutItem writes the item if its condition holds.
func (d *DynamoDB) PutItem(_ context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if err := d.begin("PutItem", in.TableName); err != nil {
		return nil, err
	}
	k, err := keyOf(in.Item)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := check(in.ConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues, d.items[k]); err != nil {
		return nil, withOld(err, in.ReturnValuesOnConditionCheckFailure, d.items[k])
	}
	d.items[k] = maps.Clone(in.Item)
	return &dynamodb.PutItemOutput{}, nil
}

// withOld adds the item that failed a condition to its ConditionalCheckFailedException when the
// request asked for it (ReturnValuesOnConditionCheckFailure ALL_OLD), as DynamoDB does: nil when no
// item is stored.
func withOld(err error, rv types.ReturnValuesOnConditionCheckFailure, cur map[string]types.AttributeValue) error {
	var ccf *types.ConditionalCheckFailedException
	if rv == types.ReturnValuesOnConditionCheckFailureAllOld && errors.As(err, &ccf) && cur != nil {
		ccf.Item = maps.Clone(cur)
	}
	return err
}

// DeleteItem removes the item if its condition holds (deleting a missing item without a condition
// succeeds, as on DynamoDB).
func (d *DynamoDB) DeleteItem(_ context.Context, in *dynamodb.DeleteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if err := d.begin("DeleteItem", in.TableName); err != nil {
		return nil, err
	}
	k, err := keyOf(in.Key)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := check(in.ConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues, d.items[k]); err != nil {
		return nil, withOld(err, in.ReturnValuesOnConditionCheckFailure, d.items[k])
	}
	delete(d.items, k)
	return &dynamodb.DeleteItemOutput{}, nil
}

// TransactWriteItems applies its Puts all or none, as DynamoDB does: when any condition fails,
// nothing is written and the answer is a TransactionCanceledException with one reason per action, in
// order ("ConditionalCheckFailed" or "None"). Two actions on one item are refused
// (ValidationException), as DynamoDB refuses them. Only Put actions are understood.
func (d *DynamoDB) TransactWriteItems(_ context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if d.OnCall != nil {
		if err := d.OnCall("TransactWriteItems"); err != nil {
			return nil, err
		}
	}
	if len(in.TransactItems) == 0 || len(in.TransactItems) > 100 {
		return nil, validation(fmt.Sprintf("a transaction takes 1 to 100 actions, got %d", len(in.TransactItems)))
	}
	keys := make([][2]string, len(in.TransactItems))
	seen := map[[2]string]bool{}
	for i, it := range in.TransactItems {
		if it.Put == nil || it.Update != nil || it.Delete != nil || it.ConditionCheck != nil {
			return nil, fmt.Errorf("fakes: transaction action %d: only Put is supported", i)
		}
		if aws.ToString(it.Put.TableName) != d.Table {
			return nil, &types.ResourceNotFoundException{Message: aws.String("Requested resource not found: table " + aws.ToString(it.Put.TableName))}
		}
		k, err := keyOf(it.Put.Item)
		if err != nil {
			return nil, err
		}
		if seen[k] {
			return nil, validation("Transaction request cannot include multiple operations on one item")
		}
		seen[k], keys[i] = true, k
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	reasons := make([]types.CancellationReason, len(in.TransactItems))
	failed := false
	for i, it := range in.TransactItems {
		reasons[i].Code = aws.String("None")
		err := check(it.Put.ConditionExpression, it.Put.ExpressionAttributeNames, it.Put.ExpressionAttributeValues, d.items[keys[i]])
		var ccf *types.ConditionalCheckFailedException
		switch {
		case errors.As(err, &ccf):
			reasons[i].Code, reasons[i].Message, failed = aws.String("ConditionalCheckFailed"), aws.String("The conditional request failed"), true
		case err != nil:
			return nil, err
		}
	}
	if failed {
		return nil, &types.TransactionCanceledException{
			Message:             aws.String("Transaction cancelled, please refer cancellation reasons for specific reasons"),
			CancellationReasons: reasons,
		}
	}
	for i, it := range in.TransactItems {
		d.items[keys[i]] = maps.Clone(it.Put.Item)
	}
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

// sorted returns the keys in (pk, sk) order, after start when start is set.
func (d *DynamoDB) sorted(start map[string]types.AttributeValue, keep func([2]string) bool) ([][2]string, error) {
	var after *[2]string
	if len(start) > 0 {
		k, err := keyOf(start)
		if err != nil {
			return nil, err
		}
		after = &k
	}
	var keys [][2]string
	for k := range d.items {
		if keep(k) && (after == nil || k[0] > after[0] || (k[0] == after[0] && k[1] > after[1])) {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	return keys, nil
}

func (d *DynamoDB) page(keys [][2]string, limit *int32) ([][2]string, map[string]types.AttributeValue) {
	n := d.PageSize
	if limit != nil && (n == 0 || int(*limit) < n) {
		n = int(*limit)
	}
	if n <= 0 || len(keys) <= n {
		return keys, nil
	}
	last := keys[n-1]
	return keys[:n], map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: last[0]}, "sk": &types.AttributeValueMemberS{Value: last[1]},
	}
}

// Query returns the items of one partition ("pk = :pk") in sort-key order.
func (d *DynamoDB) Query(_ context.Context, in *dynamodb.QueryInput, _ ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if err := d.begin("Query", in.TableName); err != nil {
		return nil, err
	}
	skPrefix := ""
	switch kc := strings.Join(strings.Fields(aws.ToString(in.KeyConditionExpression)), " "); {
	case in.FilterExpression != nil:
		return nil, fmt.Errorf("fakes: query %q (filter %q) is not supported", kc, aws.ToString(in.FilterExpression))
	case kc == "pk = :pk":
	case kc == "pk = :pk AND begins_with(sk, :sk)":
		p, ok := in.ExpressionAttributeValues[":sk"].(*types.AttributeValueMemberS)
		if !ok {
			return nil, validation("key condition value :sk must be a string")
		}
		skPrefix = p.Value
	default:
		return nil, fmt.Errorf("fakes: query %q is not supported", kc)
	}
	pk, ok := in.ExpressionAttributeValues[":pk"].(*types.AttributeValueMemberS)
	if !ok {
		return nil, validation("key condition value :pk must be a string")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	keys, err := d.sorted(in.ExclusiveStartKey, func(k [2]string) bool { return k[0] == pk.Value && strings.HasPrefix(k[1], skPrefix) })
	if err != nil {
		return nil, err
	}
	keys, lek := d.page(keys, in.Limit)
	out := &dynamodb.QueryOutput{LastEvaluatedKey: lek}
	for _, k := range keys {
		out.Items = append(out.Items, maps.Clone(d.items[k]))
	}
	out.Count, out.ScannedCount = int32(len(out.Items)), int32(len(keys))
	return out, nil
}

// Scan returns the table's items in key order, a page at a time, filtered by "begins_with(pk, :p)".
func (d *DynamoDB) Scan(_ context.Context, in *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	if err := d.begin("Scan", in.TableName); err != nil {
		return nil, err
	}
	keep := func(map[string]types.AttributeValue) bool { return true }
	if in.FilterExpression != nil {
		if strings.Join(strings.Fields(*in.FilterExpression), " ") != "begins_with(pk, :p)" {
			return nil, fmt.Errorf("fakes: filter %q is not supported", *in.FilterExpression)
		}
		p, ok := in.ExpressionAttributeValues[":p"].(*types.AttributeValueMemberS)
		if !ok {
			return nil, validation("filter value :p must be a string")
		}
		keep = func(it map[string]types.AttributeValue) bool {
			pk, _ := str(it, "pk")
			return strings.HasPrefix(pk, p.Value)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	keys, err := d.sorted(in.ExclusiveStartKey, func([2]string) bool { return true })
	if err != nil {
		return nil, err
	}
	keys, lek := d.page(keys, in.Limit)
	out := &dynamodb.ScanOutput{LastEvaluatedKey: lek, ScannedCount: int32(len(keys))}
	for _, k := range keys {
		if it := d.items[k]; keep(it) {
			out.Items = append(out.Items, maps.Clone(it))
		}
	}
	out.Count = int32(len(out.Items))
	return out, nil
}

// Item returns a copy of the item with the key, or nil.
func (d *DynamoDB) Item(pk, sk string) map[string]types.AttributeValue {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.items[[2]string{pk, sk}])
}

// SetItem stores an item unconditionally.
func (d *DynamoDB) SetItem(item map[string]types.AttributeValue) error {
	k, err := keyOf(item)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.items[k] = maps.Clone(item)
	d.mu.Unlock()
	return nil
}
