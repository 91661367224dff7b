package config_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
)

// fakeDynamo stands in for the DynamoDB client: function fields answer, calls are recorded.
type fakeDynamo struct {
	query   func(*dynamodb.QueryInput) (*dynamodb.QueryOutput, error)
	queries []*dynamodb.QueryInput
	puts    []*dynamodb.PutItemInput
	putErr  error
	deletes []*dynamodb.DeleteItemInput
	delErr  error
}

func (f *fakeDynamo) Query(_ context.Context, in *dynamodb.QueryInput, _ ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	f.queries = append(f.queries, in)
	return f.query(in)
}

func (f *fakeDynamo) PutItem(_ context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	f.puts = append(f.puts, in)
	return &dynamodb.PutItemOutput{}, f.putErr
}

func (f *fakeDynamo) DeleteItem(_ context.Context, in *dynamodb.DeleteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	f.deletes = append(f.deletes, in)
	return &dynamodb.DeleteItemOutput{}, f.delErr
}

type av = types.AttributeValue

func s(v string) av { return &types.AttributeValueMemberS{Value: v} }
func n(v string) av { return &types.AttributeValueMemberN{Value: v} }

const table = "sfnlimit-table"

func TestDynamoStoreListOverrides(t *testing.T) {
	page1 := []map[string]av{
		{"pk": s("CONFIG"), "sk": s("TYPE#payments"), "limit": n("10"), "maxAttempts": n("4"), "stateMachineArn": s(reportsArn)},
		{"pk": s("CONFIG"), "sk": s("TYPE#reports"), "limit": n("2")},
	}
	page2 := []map[string]av{
		{"pk": s("CONFIG"), "sk": s("TYPE#monthly_reports"), "maxAttempts": n("7")},
	}
	tests := []struct {
		name    string
		give    [][]map[string]av
		want    []config.Override
		wantErr bool
	}{
		{name: "no items", give: [][]map[string]av{{}}, want: nil},
		{
			name: "one page",
			give: [][]map[string]av{page1},
			want: []config.Override{
				{Type: "payments", Limit: 10, MaxAttempts: 4, StateMachineArn: reportsArn},
				{Type: "reports", Limit: 2},
			},
		},
		{
			name: "two pages",
			give: [][]map[string]av{page1, page2},
			want: []config.Override{
				{Type: "payments", Limit: 10, MaxAttempts: 4, StateMachineArn: reportsArn},
				{Type: "reports", Limit: 2},
				{Type: "monthly_reports", MaxAttempts: 7},
			},
		},
		{
			name:    "limit of the wrong type",
			give:    [][]map[string]av{{{"pk": s("CONFIG"), "sk": s("TYPE#x"), "limit": s("ten")}}},
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := &fakeDynamo{}
			db.query = func(in *dynamodb.QueryInput) (*dynamodb.QueryOutput, error) {
				if !aws.ToBool(in.ConsistentRead) {
					t.Errorf("config Query without ConsistentRead: a read past the cache could miss a pause or resume just written")
				}
				page := len(db.queries) - 1
				out := &dynamodb.QueryOutput{Items: tt.give[page]}
				if page+1 < len(tt.give) {
					out.LastEvaluatedKey = map[string]av{"pk": s("CONFIG"), "sk": s("page" + string(rune('0'+page)))}
				}
				return out, nil
			}
			got, err := config.NewDynamoStore(db, table).ListOverrides(context.Background())
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ListOverrides() = %+v, nil, want error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ListOverrides() error = %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ListOverrides() = %+v, want %+v", got, tt.want)
			}
			if len(db.queries) != len(tt.give) {
				t.Fatalf("Query calls = %d, want %d (one per page)", len(db.queries), len(tt.give))
			}
			for i, q := range db.queries {
				if aws.ToString(q.TableName) != table {
					t.Errorf("Query #%d TableName = %q, want %q", i, aws.ToString(q.TableName), table)
				}
				if got := aws.ToString(q.KeyConditionExpression); got != "pk = :pk" {
					t.Errorf("Query #%d KeyConditionExpression = %q, want %q", i, got, "pk = :pk")
				}
				if got := q.ExpressionAttributeValues[":pk"]; !reflect.DeepEqual(got, s("CONFIG")) {
					t.Errorf("Query #%d :pk = %#v, want S CONFIG", i, got)
				}
				if i > 0 {
					want := map[string]av{"pk": s("CONFIG"), "sk": s("page" + string(rune('0'+i-1)))}
					if !reflect.DeepEqual(q.ExclusiveStartKey, want) {
						t.Errorf("Query #%d ExclusiveStartKey = %v, want the previous page's LastEvaluatedKey", i, q.ExclusiveStartKey)
					}
				}
			}
		})
	}
}

func TestDynamoStoreListOverridesError(t *testing.T) {
	errThrottled := errors.New("ProvisionedThroughputExceededException")
	db := &fakeDynamo{query: func(*dynamodb.QueryInput) (*dynamodb.QueryOutput, error) { return nil, errThrottled }}
	got, err := config.NewDynamoStore(db, table).ListOverrides(context.Background())
	if !errors.Is(err, errThrottled) || !strings.Contains(err.Error(), table) {
		t.Errorf("ListOverrides() = %+v, %v, want an error naming the table and wrapping the client's", got, err)
	}
}

func TestDynamoStoreSetOverride(t *testing.T) {
	tests := []struct {
		name     string
		give     config.Override
		wantItem map[string]av
		wantErr  bool
	}{
		{
			name:     "limit only",
			give:     config.Override{Type: "payments", Limit: 10},
			wantItem: map[string]av{"pk": s("CONFIG"), "sk": s("TYPE#payments"), "limit": n("10")},
		},
		{
			name: "every field",
			give: config.Override{Type: "monthly_reports", Limit: 3, MaxAttempts: 6, StateMachineArn: reportsArn, Strategy: "random"},
			wantItem: map[string]av{
				"pk": s("CONFIG"), "sk": s("TYPE#monthly_reports"), "limit": n("3"), "maxAttempts": n("6"), "stateMachineArn": s(reportsArn),
				"strategy": s("random"),
			},
		},
		{
			name:     "state machine only",
			give:     config.Override{Type: "reports", StateMachineArn: reportsArn},
			wantItem: map[string]av{"pk": s("CONFIG"), "sk": s("TYPE#reports"), "stateMachineArn": s(reportsArn)},
		},
		{
			name:     "limit at the quota",
			give:     config.Override{Type: "big", Limit: 120000},
			wantItem: map[string]av{"pk": s("CONFIG"), "sk": s("TYPE#big"), "limit": n("120000")},
		},
		{name: "no type", give: config.Override{Limit: 1}, wantErr: true},
		{name: "invalid type", give: config.Override{Type: "pay ments", Limit: 1}, wantErr: true},
		{name: "negative limit", give: config.Override{Type: "payments", Limit: -1}, wantErr: true},
		{name: "negative max attempts", give: config.Override{Type: "payments", MaxAttempts: -1}, wantErr: true},
		{name: "unknown strategy", give: config.Override{Type: "payments", Strategy: "fastest"}, wantErr: true},
		{name: "limit over the quota", give: config.Override{Type: "payments", Limit: 120001}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := &fakeDynamo{}
			err := config.NewDynamoStore(db, table).SetOverride(context.Background(), tt.give)
			if tt.wantErr {
				if err == nil {
					t.Errorf("SetOverride(%+v) = nil, want error", tt.give)
				}
				if len(db.puts) != 0 {
					t.Errorf("SetOverride(%+v) wrote %d items, want none", tt.give, len(db.puts))
				}
				return
			}
			if err != nil {
				t.Fatalf("SetOverride(%+v) error = %v", tt.give, err)
			}
			if len(db.puts) != 1 {
				t.Fatalf("SetOverride(%+v) made %d PutItem calls, want 1", tt.give, len(db.puts))
			}
			put := db.puts[0]
			if aws.ToString(put.TableName) != table {
				t.Errorf("PutItem TableName = %q, want %q", aws.ToString(put.TableName), table)
			}
			if !reflect.DeepEqual(put.Item, tt.wantItem) {
				t.Errorf("PutItem Item = %v, want %v", put.Item, tt.wantItem)
			}
		})
	}
}

func TestDynamoStoreWriteErrors(t *testing.T) {
	errDenied := errors.New("AccessDeniedException")
	db := &fakeDynamo{putErr: errDenied, delErr: errDenied}
	st := config.NewDynamoStore(db, table)
	if err := st.SetOverride(context.Background(), config.Override{Type: "payments", Limit: 1}); !errors.Is(err, errDenied) {
		t.Errorf("SetOverride() = %v, want an error wrapping the client's", err)
	}
	if err := st.DeleteOverride(context.Background(), "payments"); !errors.Is(err, errDenied) {
		t.Errorf("DeleteOverride() = %v, want an error wrapping the client's", err)
	}
}

func TestDynamoStoreDeleteOverride(t *testing.T) {
	db := &fakeDynamo{}
	if err := config.NewDynamoStore(db, table).DeleteOverride(context.Background(), "monthly_reports"); err != nil {
		t.Fatalf("DeleteOverride(monthly_reports) error = %v", err)
	}
	if len(db.deletes) != 1 {
		t.Fatalf("DeleteOverride made %d DeleteItem calls, want 1", len(db.deletes))
	}
	want := map[string]av{"pk": s("CONFIG"), "sk": s("TYPE#monthly_reports")}
	if got := db.deletes[0]; aws.ToString(got.TableName) != table || !reflect.DeepEqual(got.Key, want) {
		t.Errorf("DeleteItem = table %q key %v, want table %q key %v", aws.ToString(got.TableName), got.Key, table, want)
	}
}

// What SetOverride writes, ListOverrides reads back the same.
func TestDynamoStoreRoundTrip(t *testing.T) {
	db := &fakeDynamo{}
	db.query = func(*dynamodb.QueryInput) (*dynamodb.QueryOutput, error) {
		out := &dynamodb.QueryOutput{}
		for _, p := range db.puts {
			out.Items = append(out.Items, p.Item)
		}
		return out, nil
	}
	st := config.NewDynamoStore(db, table)
	want := []config.Override{
		{Type: "payments", Limit: 10, MaxAttempts: 4, StateMachineArn: reportsArn},
		{Type: "reports", Limit: 2},
		{Type: "a_b_c", MaxAttempts: 1},
		{Type: "llm", KeyLimit: 5, KeyLimits: map[string]int{"acme": 20, "tenant-7.eu": 1}},
		{Type: "partner", Rate: config.Rate{PerSecond: 2.5, Burst: 5}, Pause: &config.Pause{Reason: "partner outage INC-42", Since: time.Date(2026, 11, 25, 9, 30, 0, 123e6, time.UTC)}},
		{Type: "quiet", NoRate: true, Pause: &config.Pause{Since: time.Date(2026, 11, 25, 9, 31, 0, 0, time.UTC)}},
		{Type: "tenants", KeyRate: config.Rate{PerSecond: 0.5, Burst: 2}, KeyRates: map[string]config.Rate{"noisy": {PerSecond: 0.1, Burst: 1}, "premium": {PerSecond: 5, Burst: 10}}},
		{Type: "reindex", KeyLimit: 1, Overflow: config.OverflowCancel},
		{Type: "sync", Overflow: config.OverflowQueue},
	}
	for _, o := range want {
		if err := st.SetOverride(context.Background(), o); err != nil {
			t.Fatalf("SetOverride(%+v) error = %v", o, err)
		}
	}
	got, err := st.ListOverrides(context.Background())
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ListOverrides() = %+v, %v, want %+v", got, err, want)
	}
}

// Override.Validate accepts any rate from 0 to MaxRate, such as one start a minute (1/60 a second),
// and the type's own rate is stored as a number; a key's rate is stored as Rate.String writes it
// ("0.016666666666666666:1") but read back with ParseRate, which takes at most 3 decimals: the
// item reads as invalid, and the whole override (limit, pause, caps) is ignored. What Validate
// accepts, the store must read back (or Validate must refuse it, as the CLI does).
func TestDynamoStoreRoundTripsEveryValidKeyRate(t *testing.T) {
	db := &fakeDynamo{}
	db.query = func(*dynamodb.QueryInput) (*dynamodb.QueryOutput, error) {
		out := &dynamodb.QueryOutput{}
		for _, p := range db.puts {
			out.Items = append(out.Items, p.Item)
		}
		return out, nil
	}
	st := config.NewDynamoStore(db, table)
	o := config.Override{Type: "tenants", Limit: 3, KeyRate: config.Rate{PerSecond: 1.0 / 60, Burst: 1}, KeyRates: map[string]config.Rate{"noisy": {PerSecond: 0.0015, Burst: 1}}}
	if err := o.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v", o, err)
	}
	if err := st.SetOverride(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	got, err := st.ListOverrides(context.Background())
	if err != nil || len(got) != 1 || got[0].Validate() != nil || !reflect.DeepEqual(got[0], o) {
		var verr error
		if len(got) == 1 {
			verr = got[0].Validate()
		}
		t.Errorf("ListOverrides() = %+v, %v (Validate: %v), want %+v back", got, err, verr, o)
	}
}

// A type's pools, its leaving the deployment's pools and its share, and a pool's live cap (the item
// POOL#{name}, not a type's), are written as the items the functions read, and read back the same;
// DeletePool removes the pool's item only.
func TestDynamoStoreRoundTripsPools(t *testing.T) {
	db := &fakeDynamo{}
	db.query = func(*dynamodb.QueryInput) (*dynamodb.QueryOutput, error) {
		out := &dynamodb.QueryOutput{}
		for _, p := range db.puts {
			out.Items = append(out.Items, p.Item)
		}
		return out, nil
	}
	st := config.NewDynamoStore(db, table)
	want := []config.Override{
		{Type: "classify", Limit: 4, Pools: []string{"llm_api", "pay"}, Share: 3},
		{Type: "summarize", Pools: []string{"llm_api"}},
		{Type: "reports", NoPools: true},
		{Type: "batch", Share: 100},
		{Pool: "llm_api", Limit: 40},
		{Pool: "pay", Limit: 1000},
	}
	for _, o := range want {
		if err := o.Validate(); err != nil {
			t.Fatalf("Validate(%+v) = %v", o, err)
		}
		if err := st.SetOverride(context.Background(), o); err != nil {
			t.Fatalf("SetOverride(%+v) error = %v", o, err)
		}
	}
	wantItems := []map[string]av{
		{"pk": s("CONFIG"), "sk": s("TYPE#classify"), "limit": n("4"), "pools": s("llm_api+pay"), "share": n("3")},
		{"pk": s("CONFIG"), "sk": s("TYPE#summarize"), "pools": s("llm_api")},
		{"pk": s("CONFIG"), "sk": s("TYPE#reports"), "noPools": &types.AttributeValueMemberBOOL{Value: true}},
		{"pk": s("CONFIG"), "sk": s("TYPE#batch"), "share": n("100")},
		{"pk": s("CONFIG"), "sk": s("POOL#llm_api"), "limit": n("40")},
		{"pk": s("CONFIG"), "sk": s("POOL#pay"), "limit": n("1000")},
	}
	for i, p := range db.puts {
		if !reflect.DeepEqual(p.Item, wantItems[i]) {
			t.Errorf("SetOverride(%+v) wrote %v, want %v", want[i], p.Item, wantItems[i])
		}
	}
	got, err := st.ListOverrides(context.Background())
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ListOverrides() = %+v, %v, want %+v", got, err, want)
	}

	if err := st.DeletePool(context.Background(), "llm_api"); err != nil {
		t.Fatalf("DeletePool(llm_api) error = %v", err)
	}
	wantKey := map[string]av{"pk": s("CONFIG"), "sk": s("POOL#llm_api")}
	if len(db.deletes) != 1 || aws.ToString(db.deletes[0].TableName) != table || !reflect.DeepEqual(db.deletes[0].Key, wantKey) {
		t.Errorf("DeletePool(llm_api) made %d DeleteItem calls (%+v), want one of table %q key %v", len(db.deletes), db.deletes, table, wantKey)
	}
	db.delErr = errors.New("throttled")
	if err := st.DeletePool(context.Background(), "pay"); err == nil || !strings.Contains(err.Error(), "pool pay") || !strings.Contains(err.Error(), "throttled") {
		t.Errorf("DeletePool(pay) on a failing table = %v, want an error naming the pool and the cause", err)
	}
}
