package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// BridgeConfig is what Bridge needs.
type BridgeConfig struct {
	// URL is the running kiln's base URL (http://host:port); its MCP endpoint is URL/mcp.
	URL string
	// Key is the API key sent to it; "" when its auth is off.
	Key     string
	In      io.ReadCloser  // the client's messages, one JSON per line
	Out     io.WriteCloser // the answers
	Version string
	Log     *slog.Logger
	// HTTPClient makes the requests to kiln; http.DefaultClient's transport when nil.
	HTTPClient *http.Client
}

// Bridge serves kiln's tools over stdio for a client that starts a command, as a
// thin proxy: it connects to the running kiln's /mcp as an MCP client and forwards
// each tool call, resource read, progress notification and cancellation. It returns
// when the client closes its end or ctx ends.
func Bridge(ctx context.Context, cfg BridgeConfig) error {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	base := http.DefaultTransport
	if cfg.HTTPClient != nil && cfg.HTTPClient.Transport != nil {
		base = cfg.HTTPClient.Transport
	}
	hc := &http.Client{Transport: keyTransport{key: cfg.Key, next: base}}
	fw := &forwarder{sessions: map[string]*sdk.ServerSession{}}
	client := sdk.NewClient(&sdk.Implementation{Name: "kiln-mcp-bridge", Version: cfg.Version}, &sdk.ClientOptions{
		ProgressNotificationHandler: fw.progress,
	})
	endpoint := strings.TrimSuffix(cfg.URL, "/") + "/mcp"
	remote, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
	if err != nil {
		return fmt.Errorf("connect to kiln at %s: %w", endpoint, err)
	}
	defer remote.Close()

	server := newServer(cfg.Version, cfg.Log)
	for tool, err := range remote.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("list kiln's tools: %w", err)
		}
		server.AddTool(tool, fw.callTool(remote, tool.Name))
	}
	for tmpl, err := range remote.ResourceTemplates(ctx, nil) {
		if err != nil {
			return fmt.Errorf("list kiln's resource templates: %w", err)
		}
		server.AddResourceTemplate(tmpl, func(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			return remote.ReadResource(ctx, &sdk.ReadResourceParams{URI: req.Params.URI})
		})
	}
	err = server.Run(ctx, &sdk.IOTransport{Reader: cfg.In, Writer: cfg.Out})
	if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// forwarder passes progress notifications of kiln's answers back to the client that
// asked, by progress token.
type forwarder struct {
	mu       sync.Mutex
	sessions map[string]*sdk.ServerSession // progress token → the local session
}

func tokenKey(t any) string { return fmt.Sprint(t) }

func (f *forwarder) callTool(remote *sdk.ClientSession, name string) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		params := &sdk.CallToolParams{Name: name, Arguments: req.Params.Arguments}
		if tok := req.Params.GetProgressToken(); tok != nil {
			// Set as it came: SetProgressToken refuses a number decoded as float64.
			params.Meta = sdk.Meta{"progressToken": tok}
			key := tokenKey(tok)
			f.mu.Lock()
			f.sessions[key] = req.Session
			f.mu.Unlock()
			defer func() {
				f.mu.Lock()
				delete(f.sessions, key)
				f.mu.Unlock()
			}()
		}
		// A cancelled ctx makes the client send notifications/cancelled to kiln.
		return remote.CallTool(ctx, params)
	}
}

func (f *forwarder) progress(ctx context.Context, req *sdk.ProgressNotificationClientRequest) {
	f.mu.Lock()
	ss := f.sessions[tokenKey(req.Params.ProgressToken)]
	f.mu.Unlock()
	if ss != nil {
		_ = ss.NotifyProgress(ctx, req.Params)
	}
}

// keyTransport sends the API key with every request.
type keyTransport struct {
	key  string
	next http.RoundTripper
}

func (t keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.key == "" {
		return t.next.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.key)
	return t.next.RoundTrip(r)
}
