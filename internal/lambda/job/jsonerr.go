package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// jobShape is what a body must be, in a producer's words.
const jobShape = `a job is a JSON object {"type","id","input"}`

// decodeDetail says why a body could not be read as a Submission in a producer's words, not the
// decoder's (which names Go types: "cannot unmarshal array into Go value of type job.Submission").
func decodeDetail(err error) string {
	var (
		te *json.UnmarshalTypeError
		se *json.SyntaxError
	)
	switch {
	case errors.Is(err, io.EOF):
		return "body is empty; " + jobShape
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "body ends before its JSON object does; " + jobShape
	case errors.As(err, &se):
		return fmt.Sprintf("body is not JSON (at offset %d: %s); %s", se.Offset, se.Error(), jobShape)
	case errors.As(err, &te):
		got := "a JSON " + jsonKind(te.Value)
		if te.Field == "" {
			return fmt.Sprintf("body is %s; %s", got, jobShape)
		}
		want := "of another kind"
		switch te.Type.Kind() {
		case reflect.String:
			want = "a string"
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			want = "a whole number"
			if te.Field == "redrive" {
				want = "a whole number 0-999"
			}
		}
		return fmt.Sprintf("field %q is %s; it must be %s", te.Field, got, want)
	default:
		return "body is not a JSON object; " + jobShape
	}
}

// jsonKind names the JSON kind of an UnmarshalTypeError's Value ("array", "number 1.5", "bool").
func jsonKind(v string) string {
	kind, rest, _ := strings.Cut(v, " ")
	switch kind {
	case "bool":
		return "boolean"
	case "number":
		if rest != "" {
			return "number (" + rest + ")"
		}
	}
	return kind
}
