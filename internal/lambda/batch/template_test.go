package batch_test

import (
	"os"
	"path/filepath"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
)

// The table's TTL reads the attribute the ledger writes, and is on: otherwise closed batches would
// carry an expiry nobody acts on.
func TestTheTablesTTLIsTheLedgersExpiry(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tpl struct {
		Resources map[string]struct {
			Type       string `yaml:"Type"`
			Properties struct {
				TimeToLiveSpecification struct {
					AttributeName string `yaml:"AttributeName"`
					Enabled       bool   `yaml:"Enabled"`
				} `yaml:"TimeToLiveSpecification"`
			} `yaml:"Properties"`
		} `yaml:"Resources"`
	}
	if err := yaml.Unmarshal(data, &tpl); err != nil {
		t.Fatal(err)
	}
	tables := 0
	for id, r := range tpl.Resources {
		if r.Type != "AWS::DynamoDB::Table" {
			continue
		}
		tables++
		ttl := r.Properties.TimeToLiveSpecification
		if ttl.AttributeName != batch.ExpiresAttribute || !ttl.Enabled {
			t.Errorf("%s TimeToLiveSpecification = %+v, want %s enabled", id, ttl, batch.ExpiresAttribute)
		}
	}
	if tables != 1 {
		t.Errorf("template.yaml has %d tables, want 1", tables)
	}
}
