package iampolicy

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// clientServices are the SDK clients the limiter uses, by type, with the service id the SDK's
// middleware reports for their calls (awsmiddleware.GetServiceID).
var clientServices = map[reflect.Type]string{
	reflect.TypeOf(&sqs.Client{}):         sqs.ServiceID,
	reflect.TypeOf(&sfn.Client{}):         sfn.ServiceID,
	reflect.TypeOf(&dynamodb.Client{}):    dynamodb.ServiceID,
	reflect.TypeOf(&eventbridge.Client{}): eventbridge.ServiceID,
}

// Reachable walks a wired handler (router.Router, starter.Starter, releaser.Handler, ...) through
// its fields, and returns every SDK operation it can call, as "Service.Operation" mapped to the
// fields it is reachable through. The limiter's packages hold SDK clients behind narrow interfaces
// declared where used, so the operations a field can call are the methods of its declared
// interface. A field that holds a client as its concrete type can call anything and is an error.
// modulePrefix limits the walk to the project's own types (their fields are read with reflection;
// the SDK's and the standard library's are not entered).
func Reachable(root any, modulePrefix string) (map[string][]string, error) {
	out := map[string][]string{}
	seen := map[uintptr]bool{}
	var walk func(v reflect.Value, path string) error
	walk = func(v reflect.Value, path string) error {
		switch v.Kind() {
		case reflect.Interface:
			if v.IsNil() {
				return nil
			}
			if svc, ok := clientServices[v.Elem().Type()]; ok {
				if v.Type().NumMethod() == 0 {
					return fmt.Errorf("%s holds a %s client as %s: declare the operations it uses as an interface", path, svc, v.Type())
				}
				for i := 0; i < v.Type().NumMethod(); i++ {
					op := svc + "." + v.Type().Method(i).Name
					out[op] = append(out[op], path)
				}
				return nil
			}
			return walk(v.Elem(), path)
		case reflect.Pointer:
			if v.IsNil() {
				return nil
			}
			if svc, ok := clientServices[v.Type()]; ok {
				return fmt.Errorf("%s holds the whole %s client (%s): declare the operations it uses as an interface", path, svc, v.Type())
			}
			if seen[v.Pointer()] && v.Elem().Kind() == reflect.Struct {
				return nil
			}
			seen[v.Pointer()] = true
			return walk(v.Elem(), path)
		case reflect.Struct:
			if !strings.HasPrefix(v.Type().PkgPath(), modulePrefix) {
				return nil
			}
			for i := 0; i < v.NumField(); i++ {
				f := v.Type().Field(i)
				if err := walk(v.Field(i), path+"."+f.Name); err != nil {
					return err
				}
			}
		case reflect.Slice, reflect.Array:
			for i := 0; i < v.Len(); i++ {
				if err := walk(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		case reflect.Map:
			it := v.MapRange()
			for it.Next() {
				if err := walk(it.Value(), fmt.Sprintf("%s[%v]", path, it.Key())); err != nil {
					return err
				}
			}
		}
		return nil
	}
	rv := reflect.ValueOf(root)
	if err := walk(rv, rv.Type().String()); err != nil {
		return nil, err
	}
	for k := range out {
		sort.Strings(out[k])
	}
	return out, nil
}
