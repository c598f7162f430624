package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/kilnsh/kiln/egress"
	"github.com/kilnsh/kiln/metrics"
)

// EgressConfig is the operator's egress: off unless EGRESS_ALLOW or a policy file says
// what sandboxes may reach (docs/security.md, docs/operations.md).
type EgressConfig struct {
	Allow          string `envconfig:"EGRESS_ALLOW"`
	Resolve        string `envconfig:"EGRESS_RESOLVE"`
	AllowPrivate   string `envconfig:"EGRESS_ALLOW_PRIVATE"`
	MaxConnections int    `envconfig:"EGRESS_MAX_CONNECTIONS"`
	MaxBytes       int64  `envconfig:"EGRESS_MAX_BYTES"`
	PolicyFile     string `envconfig:"EGRESS_POLICY_FILE"`
	// CABundle is PEM text, or the path of a file of it: CAs the sandboxes trust beside
	// the system's (a company's proxy, an internal index).
	CABundle string `envconfig:"EGRESS_CA_BUNDLE"`
	// The package indexes the sandboxes' installers use, passed on as they are set.
	PipIndexURL      string `envconfig:"PIP_INDEX_URL"`
	PipExtraIndexURL string `envconfig:"PIP_EXTRA_INDEX_URL"`
	PipTrustedHost   string `envconfig:"PIP_TRUSTED_HOST"`
	NpmRegistry      string `envconfig:"NPM_CONFIG_REGISTRY"`
	// SocketDir is where kiln makes the Unix sockets sandboxes on Docker reach its proxy
	// through, a path the Docker daemon must see as kiln does; "off" carries every
	// connection as net frames on the attach stream, as happens anyway when the daemon
	// cannot mount it. Unset: the temporary directory. Each instance keeps its sockets
	// in a directory of its own there, kiln-egress-<hash of INSTANCE_ID>.
	SocketDir string `envconfig:"EGRESS_SOCKET_DIR"`
	// SandboxPort: kiln listens for the code's proxy connections on 127.0.0.1 in each
	// Docker (runc) sandbox's own network namespace when it may enter one (root on the
	// host); false, or a kiln that may not, uses the socket above or the frames.
	SandboxPort bool `envconfig:"EGRESS_SANDBOX_PORT" default:"true"`
}

// socketDir is EGRESS_SOCKET_DIR as the Docker runtime takes it: "" for none.
func (c EgressConfig) socketDir() string {
	switch c.SocketDir {
	case "off":
		return ""
	case "":
		return os.TempDir()
	}
	return c.SocketDir
}

// egressSetup is the egress configuration, parsed and checked.
type egressSetup struct {
	base egress.Policy
	file *egress.Policies
	ca   string // PEM
}

// On reports whether sandboxes get a way out at all: something is allowed somewhere.
func (e *egressSetup) On() bool { return e != nil && (!e.base.Off() || e.file != nil) }

// parseEgress reads the egress variables and the files they name.
func (c EgressConfig) parseEgress() (*egressSetup, error) {
	base, err := egress.ParsePolicy(egress.Settings{
		Allow: egress.SplitList(c.Allow), Resolve: egress.SplitList(c.Resolve),
		AllowPrivate: egress.SplitList(c.AllowPrivate), MaxConnections: c.MaxConnections, MaxBytes: c.MaxBytes,
	})
	if err != nil {
		return nil, err
	}
	e := &egressSetup{base: base}
	if e.file, err = c.readPolicies(); err != nil {
		return nil, err
	}
	if ca := strings.TrimSpace(c.CABundle); ca != "" {
		if !strings.HasPrefix(ca, "-----BEGIN") {
			data, err := os.ReadFile(ca)
			if err != nil {
				return nil, fmt.Errorf("EGRESS_CA_BUNDLE: neither PEM text nor a file: %w", err)
			}
			ca = strings.TrimSpace(string(data))
		}
		if !strings.Contains(ca, "-----BEGIN CERTIFICATE-----") {
			return nil, fmt.Errorf("EGRESS_CA_BUNDLE: no PEM certificate in it")
		}
		e.ca = ca + "\n"
	}
	return e, nil
}

// readPolicies reads EGRESS_POLICY_FILE, when set.
func (c EgressConfig) readPolicies() (*egress.Policies, error) {
	if c.PolicyFile == "" {
		return nil, nil
	}
	data, err := os.ReadFile(c.PolicyFile)
	if err != nil {
		return nil, fmt.Errorf("EGRESS_POLICY_FILE: %w", err)
	}
	ps, err := egress.ParsePolicies(data)
	if err != nil {
		return nil, fmt.Errorf("EGRESS_POLICY_FILE %s: %w", c.PolicyFile, err)
	}
	return ps, nil
}

// ReloadEgress reads EGRESS_POLICY_FILE again (on SIGHUP): the calls that start from now
// on get its policies. A file that does not parse changes nothing.
func (m *Main) ReloadEgress() error {
	if m.gate == nil || m.cfg.PolicyFile == "" {
		return fmt.Errorf("no EGRESS_POLICY_FILE to reload")
	}
	ps, err := m.cfg.readPolicies()
	if err != nil {
		return err
	}
	m.gate.SetPolicies(ps)
	return nil
}

// egressEnv is what egress adds to the sandboxes' environment: the switch that opens
// the REPL's proxy port, the CAs, and the package indexes.
func (c EgressConfig) egressEnv(e *egressSetup) []string {
	if !e.On() {
		return nil
	}
	env := []string{"KILN_EGRESS=1"}
	if e.ca != "" {
		env = append(env, "KILN_EGRESS_CA="+e.ca)
	}
	for _, v := range [][2]string{
		{"PIP_INDEX_URL", c.PipIndexURL}, {"PIP_EXTRA_INDEX_URL", c.PipExtraIndexURL},
		{"PIP_TRUSTED_HOST", c.PipTrustedHost}, {"NPM_CONFIG_REGISTRY", c.NpmRegistry},
	} {
		if v[1] != "" {
			env = append(env, v[0]+"="+v[1])
		}
	}
	return env
}

// newGate starts the egress proxy for e, whose every decision is logged and counted.
func newGate(e *egressSetup, met *metrics.Metrics, log *slog.Logger) *egress.Gate {
	p := egress.New(egress.Options{
		Logger: log,
		Audit: func(r egress.Record) {
			met.Egress(string(r.Decision.Code), r.BytesUp, r.BytesDown)
			level := slog.LevelInfo
			if !r.Decision.Allowed() {
				level = slog.LevelWarn
			}
			log.Log(context.Background(), level, "egress", "caller", r.Caller, "session", r.Session, "method", r.Method,
				"host", r.Host, "port", r.Port, "addr", r.Addr.String(), "decision", string(r.Decision.Code),
				"reason", r.Decision.Reason, "status", r.Status, "bytes_up", r.BytesUp, "bytes_down", r.BytesDown,
				"duration_ms", r.Duration.Milliseconds(), "err", r.Err)
		},
	})
	return egress.NewGate(p, e.base, e.file)
}
