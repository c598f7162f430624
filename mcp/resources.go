package mcp

import (
	"context"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kilnsh/kiln"
)

// fileURITemplate names a file of a session as a resource.
const fileURITemplate = "kiln://sessions/{session_id}/files/{file_id}"

func fileURI(sid, fid string) string { return "kiln://sessions/" + sid + "/files/" + fid }

// parseFileURI returns the ids of a file URI.
func parseFileURI(uri string) (sid, fid string, ok bool) {
	rest, found := strings.CutPrefix(uri, "kiln://sessions/")
	if !found {
		return "", "", false
	}
	sid, fid, found = strings.Cut(rest, "/files/")
	if !found || !kiln.ValidID(sid) || !kiln.ValidID(fid) {
		return "", "", false
	}
	return sid, fid, true
}

// readFile answers resources/read of a session's file: text for UTF-8 text, else a blob.
func (h *Handler) readFile(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	sid, fid, ok := parseFileURI(uri)
	if !ok || req.Session == nil {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	st := h.state(req.Session.ID())
	if st == nil {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	f, data, err := h.sessions.File(ctx, st.caller, sid, fid)
	if err != nil {
		if kiln.ErrorCode(err) == kiln.CodeNotFound {
			return nil, sdk.ResourceNotFoundError(uri)
		}
		h.log.Error("mcp resource read failed", "err", err)
		return nil, err
	}
	rc := &sdk.ResourceContents{URI: uri, MIMEType: f.ContentType}
	if isText(f.ContentType, data) {
		rc.Text = string(data)
	} else {
		rc.Blob = data
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{rc}}, nil
}

// isText reports whether a file reads as text: a text type, JSON, or valid UTF-8
// without NUL bytes.
func isText(contentType string, data []byte) bool {
	if strings.HasPrefix(contentType, "text/") || strings.Contains(contentType, "json") || strings.Contains(contentType, "xml") {
		return utf8.Valid(data)
	}
	return contentType == "application/octet-stream" && utf8.Valid(data) && !strings.ContainsRune(string(data), 0)
}
