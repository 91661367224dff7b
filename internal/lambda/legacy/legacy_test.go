package legacy_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/legacy"
	"github.com/sfnlimit/sfnlimit/internal/tools/testmoto"
)

var moto *dynamodb.Client

func TestMain(m *testing.M) { os.Exit(testmoto.RunDynamoDB(m, &moto)) }

func put(t *testing.T, table, pk, sk string) {
	t.Helper()
	if _, err := moto.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &table, Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: sk},
	}}); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, table string) map[string]int {
	t.Helper()
	out, err := moto.Scan(context.Background(), &dynamodb.ScanInput{TableName: &table})
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, it := range out.Items {
		n[it["pk"].(*types.AttributeValueMemberS).Value]++
	}
	return n
}

// An upgraded table's retired lane counts and markers go, PerCall at a time, type by type; leases,
// config and other types' items stay.
func TestCleanDeletesOnlyRetiredCounts(t *testing.T) {
	ctx := context.Background()
	table := testmoto.Table(t, moto, "legacy")
	for i := range legacy.PerCall + 20 {
		put(t, table, "OCC#llm", fmt.Sprintf("JOB#0#doc-%d", i))
	}
	put(t, table, "OCC#llm", "LANE#000001")
	put(t, table, "OCC#payments", "LANE#000001")
	put(t, table, "LEASE#llm", "LANE#000001")
	put(t, table, "CONFIG", "llm")
	c := legacy.NewCleaner(moto, table)
	var got []int
	for range 3 {
		n, err := c.Clean(ctx, "llm")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
	}
	if fmt.Sprint(got) != fmt.Sprint([]int{legacy.PerCall, 21, 0}) {
		t.Errorf("deleted per call = %v, want %d, 21, 0", got, legacy.PerCall)
	}
	// Found clean once, a type is not read again by this cleaner (nothing writes such items any more).
	put(t, table, "OCC#llm", "LANE#000009")
	if n, err := c.Clean(ctx, "llm"); err != nil || n != 0 {
		t.Errorf("Clean(llm) after it was found clean = %d, %v; want 0 without reading", n, err)
	}
	if n, err := legacy.NewCleaner(moto, table).Clean(ctx, "llm"); err != nil || n != 1 {
		t.Errorf("a new cleaner's Clean(llm) = %d, %v; want the 1 item", n, err)
	}
	if n := count(t, table); n["OCC#llm"] != 0 || n["OCC#payments"] != 1 || n["LEASE#llm"] != 1 || n["CONFIG"] != 1 {
		t.Errorf("items left per partition = %v, want llm's counts gone and the rest kept", n)
	}
}
