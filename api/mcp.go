package api

import (
	"context"
	"net/http"

	"github.com/kilnsh/kiln/session"
)

// CallerFrom returns who sent the request whose context ctx is, as requireKey found
// them: for another transport mounted in the router (the MCP handler), which has no
// user id header of its own.
func CallerFrom(ctx context.Context) session.Caller {
	if ri, ok := ctx.Value(keyRequest).(*reqInfo); ok {
		return session.Caller{Key: ri.owner, User: ri.user, Tenant: ri.tenant, Proven: ri.user != ""}
	}
	return session.Caller{}
}

// RunSlots returns a function that takes one of the concurrent execution slots of
// the caller of the request whose context ctx is, as POST /exec does: ok is false when
// every slot is taken, else release must be called once the run is over. A transport
// that runs code after its HTTP request is read (MCP's tools) takes slots with it.
func RunSlots(ctx context.Context) func() (release func(), ok bool) {
	ri, ok := ctx.Value(keyRequest).(*reqInfo)
	if !ok || ri.acquire == nil {
		return func() (func(), bool) { return func() {}, true }
	}
	return ri.acquire
}

// withSlots puts the caller's execution slots on the request, for RunSlots.
func (s *Server) withSlots(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := callerKey(r)
		info(r).acquire = func() (func(), bool) { return s.limiter.acquire(key) }
		next.ServeHTTP(w, r)
	})
}
