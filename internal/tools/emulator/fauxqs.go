package emulator

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

//go:embed fauxqs_preload.cjs
var fauxqsPreload []byte

// FauxqsVersion is the fauxqs release package.json pins.
const FauxqsVersion = "2.4.1"

// FauxqsOptions configures StartFauxqs. The zero value serves on a free loopback port, with fauxqs and
// Node from the repository's node_modules.
type FauxqsOptions struct {
	// RepoRoot holds node_modules (default: the nearest directory with a go.mod, from the working
	// directory up).
	RepoRoot string
	// Node is the Node 22 binary (default RepoRoot/node_modules/node/bin/node, npm's node@22).
	Node string
	// Port to serve on; 0 lets fauxqs pick a free one and report it.
	Port int
	// StartTimeout bounds the wait until fauxqs answers (default 30 s).
	StartTimeout time.Duration
	// LogWriter, if set, receives fauxqs's output as well as the in-memory tail.
	LogWriter io.Writer
}

// StartFauxqs starts fauxqs (an SQS emulator, stricter than moto's SQS) on a loopback port and returns
// when it answers. ctx bounds the start only; the process runs until Stop.
func StartFauxqs(ctx context.Context, opts FauxqsOptions) (*Process, error) {
	root := opts.RepoRoot
	if root == "" {
		var err error
		if root, err = RepoRoot(); err != nil {
			return nil, fmt.Errorf("start fauxqs: %w", err)
		}
	}
	cli := filepath.Join(root, "node_modules", "fauxqs", "dist", "cli.js")
	if err := checkFauxqs(root); err != nil {
		return nil, fmt.Errorf("start fauxqs: %w", err)
	}
	node := opts.Node
	if node == "" {
		node = filepath.Join(root, "node_modules", "node", "bin", "node")
	}
	if _, err := os.Stat(node); err != nil {
		return nil, fmt.Errorf("start fauxqs: node 22 not found at %s (run `make tools` in %s, which installs the pinned npm tools): %w", node, root, err)
	}

	dir, err := os.MkdirTemp("", "sfnlimit-fauxqs-")
	if err != nil {
		return nil, fmt.Errorf("start fauxqs: %w", err)
	}
	preload := filepath.Join(dir, "preload.cjs")
	if err := os.WriteFile(preload, fauxqsPreload, 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start fauxqs: write preload: %w", err)
	}
	ready := filepath.Join(dir, "ready.json")
	p, err := start(spec{
		name: "fauxqs",
		path: node,
		args: []string{"--require", preload, cli},
		dir:  root,
		env: childEnv([]string{"FAUXQS_PORT", "FAUXQS_HOST", "FAUXQS_DATA_DIR", "FAUXQS_PERSISTENCE", "FAUXQS_INIT", "NODE_OPTIONS"},
			"FAUXQS_PORT="+strconv.Itoa(opts.Port),
			"SFNLIMIT_BIND_HOST=127.0.0.1",
			"SFNLIMIT_READY_FILE="+ready,
			"NODE_NO_WARNINGS=1",
		),
		logWriter: opts.LogWriter,
		tmpDir:    dir,
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p.port = opts.Port

	err = p.waitReady(ctx, opts.StartTimeout, func(ctx context.Context) error {
		if p.endpoint == "" {
			b, err := os.ReadFile(ready)
			if err != nil {
				return errors.New("not listening yet")
			}
			var r struct {
				Host string `json:"host"`
				Port int    `json:"port"`
			}
			if err := json.Unmarshal(b, &r); err != nil {
				return fmt.Errorf("ready file %q: %w", b, err)
			}
			if r.Host != "127.0.0.1" {
				return fmt.Errorf("fauxqs listens on %s, want 127.0.0.1", r.Host)
			}
			p.port = r.Port
			p.endpoint = "http://127.0.0.1:" + strconv.Itoa(r.Port)
		}
		_, err := httpGet(ctx, p.endpoint+"/health")
		return err
	})
	if err != nil {
		_ = p.Stop()
		return nil, fmt.Errorf("start fauxqs: %w", err)
	}
	p.removeTempDir() // node has loaded the preload and written the ready file
	return p, nil
}

// checkFauxqs reports a missing or unexpected fauxqs in root's node_modules.
func checkFauxqs(root string) error {
	b, err := os.ReadFile(filepath.Join(root, "node_modules", "fauxqs", "package.json"))
	if err != nil {
		return fmt.Errorf("fauxqs %s is not installed in %s/node_modules (run `make tools` in it, which installs the pinned npm tools): %w", FauxqsVersion, root, err)
	}
	var pkg struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		return fmt.Errorf("read fauxqs package.json: %w", err)
	}
	if pkg.Version != FauxqsVersion {
		return fmt.Errorf("fauxqs %s installed in %s/node_modules, want %s (run `make tools` in it, which installs the pinned npm tools)", pkg.Version, root, FauxqsVersion)
	}
	return nil
}

// RepoRoot returns the nearest directory, from the working directory up, that holds a go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository root: no go.mod above the working directory")
		}
		dir = parent
	}
}
