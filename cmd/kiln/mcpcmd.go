package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/kilnsh/kiln/mcp"
)

// mcpCommand is "kiln mcp": kiln's MCP tools over stdio, for clients that start a
// command (Claude Desktop, Claude Code), forwarded to a running kiln. The API key
// comes from KILN_API_KEY, never from the command line, where other users see it.
func mcpCommand(args []string, stdin io.ReadCloser, stdout io.WriteCloser, stderr io.Writer) int {
	fs := flag.NewFlagSet("kiln mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", envOr("KILN_URL", "http://127.0.0.1:8080"), "the running kiln's base URL (or KILN_URL)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kiln mcp [--url URL]\n\nServes kiln's MCP tools on stdin/stdout, forwarding them to the kiln at URL.\nThe API key is read from KILN_API_KEY.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := mcp.Bridge(ctx, mcp.BridgeConfig{
		URL: *url, Key: os.Getenv("KILN_API_KEY"), In: stdin, Out: stdout, Log: log,
	})
	if err != nil {
		fmt.Fprintf(stderr, "kiln mcp: %v\n", err)
		return 1
	}
	return 0
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
