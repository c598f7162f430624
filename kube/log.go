package kube

import (
	"context"
	"log/slog"
	"strings"

	"k8s.io/klog/v2"
)

// quietClosed is a slog handler for client-go's reports: a stream kiln closed itself
// (a sandbox removed, an exec ended) reads as an error there, and is not one here.
type quietClosed struct{ slog.Handler }

func (h quietClosed) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError && r.Message == "Unhandled Error" {
		closed := false
		r.Attrs(func(a slog.Attr) bool {
			closed = closed || strings.Contains(a.Value.String(), "use of closed network connection")
			return !closed
		})
		if closed {
			if !h.Enabled(ctx, slog.LevelDebug) {
				return nil
			}
			quiet := slog.NewRecord(r.Time, slog.LevelDebug, r.Message, r.PC)
			r.Attrs(func(a slog.Attr) bool {
				quiet.AddAttrs(a)
				return true
			})
			r = quiet
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietClosed) WithAttrs(attrs []slog.Attr) slog.Handler {
	return quietClosed{h.Handler.WithAttrs(attrs)}
}

func (h quietClosed) WithGroup(name string) slog.Handler {
	return quietClosed{h.Handler.WithGroup(name)}
}

// routeKlog sends what client-go reports through klog (a broken watch, say) into kiln's
// log, with everything else.
func routeKlog(log *slog.Logger) {
	klog.SetSlogLogger(slog.New(quietClosed{log.Handler()}))
}
