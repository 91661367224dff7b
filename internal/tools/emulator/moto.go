package emulator

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

//go:embed moto_launcher.py
var motoLauncher []byte

// MotoVersion is the moto release the launcher's workarounds are written for.
const MotoVersion = "5.2.1"

// MotoOptions configures StartMoto. The zero value serves on a free loopback port, with the Step
// Functions interpreter calling moto itself.
type MotoOptions struct {
	// Python is the interpreter that can import moto (default "python3" from PATH).
	Python string
	// Port to serve on; 0 picks a free one. The listening socket is opened here and handed to moto, so
	// there is no race for the port.
	Port int
	// InterpreterEndpoint is where moto's Step Functions interpreter sends its service calls (Lambda
	// invoke, SQS, DynamoDB tasks), e.g. a gateway's URL. moto always calls http://localhost:$MOTO_PORT,
	// so only the port can be chosen: the URL must be http://localhost:PORT or http://127.0.0.1:PORT.
	// Empty means moto itself.
	InterpreterEndpoint string
	// StartTimeout bounds the wait until moto answers (default 30 s).
	StartTimeout time.Duration
	// LogWriter, if set, receives moto's output as well as the in-memory tail.
	LogWriter io.Writer
	// RequestLog keeps werkzeug's line per request in the output (off by default).
	RequestLog bool
}

// motoHealth is what the launcher answers on /_sfnlimit/health.
type motoHealth struct {
	Moto                string `json:"moto"`
	Port                int    `json:"port"`
	InterpreterPort     string `json:"interpreter_port"`
	ExecuteStateMachine bool   `json:"execute_state_machine"`
	DeepcopyPatched     bool   `json:"deepcopy_patched"`
	HotPathsPatched     bool   `json:"hot_paths_patched"`
	SQSReceivePatched   bool   `json:"sqs_receive_patched"`
}

// StartMoto starts moto's server through sfnlimit's launcher: Step Functions executes state machines,
// moto issue 10077 is worked around, and the interpreter calls opts.InterpreterEndpoint. It returns when
// moto answers. ctx bounds the start only; the process runs until Stop.
func StartMoto(ctx context.Context, opts MotoOptions) (*Process, error) {
	python := opts.Python
	if python == "" {
		python = "python3"
	}
	pythonPath, err := exec.LookPath(python)
	if err != nil {
		return nil, fmt.Errorf("start moto: %s not found (moto %s is expected preinstalled with the machine's Python): %w",
			python, MotoVersion, err)
	}
	interpreterPort := ""
	if opts.InterpreterEndpoint != "" {
		port, err := interpreterPortOf(opts.InterpreterEndpoint)
		if err != nil {
			return nil, fmt.Errorf("start moto: %w", err)
		}
		interpreterPort = strconv.Itoa(port)
	}

	dir, err := os.MkdirTemp("", "sfnlimit-moto-")
	if err != nil {
		return nil, fmt.Errorf("start moto: %w", err)
	}
	launcher := filepath.Join(dir, "moto_launcher.py")
	if err := os.WriteFile(launcher, motoLauncher, 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start moto: write launcher: %w", err)
	}
	sock, port, err := listenLoopback(opts.Port)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start moto: %w", err)
	}
	defer sock.Close() // the child has its own copy once started

	args := []string{launcher, "--fd", "3", "--host", "127.0.0.1", "--port", strconv.Itoa(port)}
	if interpreterPort != "" {
		args = append(args, "--interpreter-port", interpreterPort)
	}
	if !opts.RequestLog {
		args = append(args, "--quiet")
	}
	p, err := start(spec{
		name:      "moto",
		path:      pythonPath,
		args:      args,
		dir:       os.TempDir(),
		env:       childEnv([]string{"MOTO_PORT"}, "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1"),
		extra:     []*os.File{sock},
		logWriter: opts.LogWriter,
		tmpDir:    dir,
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p.port = port
	p.endpoint = "http://127.0.0.1:" + strconv.Itoa(port)
	if interpreterPort == "" {
		interpreterPort = strconv.Itoa(port)
	}

	err = p.waitReady(ctx, opts.StartTimeout, func(ctx context.Context) error {
		body, err := httpGet(ctx, p.endpoint+"/_sfnlimit/health")
		if err != nil {
			return err
		}
		var h motoHealth
		if err := json.Unmarshal(body, &h); err != nil {
			return fmt.Errorf("health answer %q: %w", body, err)
		}
		switch {
		case !h.ExecuteStateMachine:
			return errors.New("launcher did not turn on stepfunctions.execute_state_machine")
		case !h.DeepcopyPatched:
			return errors.New("launcher did not patch the state machine deepcopy")
		case !h.HotPathsPatched:
			return errors.New("launcher did not take moto's per-request hot paths out (an older launcher?)")
		case !h.SQSReceivePatched:
			return errors.New("launcher did not patch moto's FIFO receive (long polls would break group blocking)")
		case h.InterpreterPort != interpreterPort:
			return fmt.Errorf("interpreter calls port %s, want %s", h.InterpreterPort, interpreterPort)
		}
		return nil
	})
	if err != nil {
		_ = p.Stop()
		if isMissingMoto(p.logs.Tail(0)) {
			return nil, fmt.Errorf("start moto: %s cannot import moto (moto %s is expected preinstalled): %w",
				pythonPath, MotoVersion, err)
		}
		return nil, fmt.Errorf("start moto: %w", err)
	}
	p.removeTempDir() // python has read the launcher: a killed parent leaves no files either
	return p, nil
}

func isMissingMoto(logs string) bool {
	return strings.Contains(logs, "No module named 'moto'") || strings.Contains(logs, "No module named 'werkzeug'")
}

// interpreterPortOf returns the port of http://localhost:PORT or http://127.0.0.1:PORT.
func interpreterPortOf(endpoint string) (int, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return 0, fmt.Errorf("interpreter endpoint %q: %w", endpoint, err)
	}
	host, portText := u.Hostname(), u.Port()
	if u.Scheme != "http" || (host != "localhost" && host != "127.0.0.1") || portText == "" ||
		(u.Path != "" && u.Path != "/") {
		return 0, fmt.Errorf("interpreter endpoint %q: moto calls http://localhost:PORT, so it must be "+
			"http://localhost:PORT or http://127.0.0.1:PORT", endpoint)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port <= 0 || port > 65535 {
		return 0, fmt.Errorf("interpreter endpoint %q: bad port", endpoint)
	}
	return port, nil
}
