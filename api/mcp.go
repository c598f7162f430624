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
		return session.Caller{Key: ri.owner, User: ri.user, Tenant: ri.tenant, Proven: ri.user != "", Expires: ri.expires,
			Client: ri.client}
	}
	return session.Caller{}
}

// CallerOf returns who sent r as REST's routes see them: a token's user, or the key with
// the user its User-Id header names. For a transport mounted in the router whose clients
// send that header (Jupyter's).
func CallerOf(r *http.Request) session.Caller { return caller(r, "") }
