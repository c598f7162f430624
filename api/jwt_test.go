package api_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
	"github.com/kilnsh/kiln/auth"
)

// fakeTokens accepts tokens whose payload part names a known subject: "user-a" or
// "user-b" of tenant acme, "user-c" of tenant other, and "admin-a" of acme with the ADMIN
// role (the others have USER).
type fakeTokens struct{}

func (fakeTokens) Verify(token string) (auth.Principal, error) {
	parts := strings.Split(token, ".")
	tenants := map[string]string{"user-a": "acme", "user-b": "acme", "user-c": "other", "admin-a": "acme"}
	if tenant, ok := tenants[parts[1]]; ok {
		p := auth.Principal{Tenant: tenant, Subject: parts[1], Role: "USER"}
		if strings.HasPrefix(parts[1], "admin-") {
			p.Role = "ADMIN"
		}
		return p, nil
	}
	return auth.Principal{}, &auth.Error{Reason: "expired", Err: errors.New("token expired 5 minutes ago")}
}

// token is a token of the fake's shape: a JSON header, the subject, a signature.
func token(sub string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"EdDSA"}`)) + "." + sub + ".sig"
}

func TestTokens(t *testing.T) {
	var logs bytes.Buffer
	h := api.NewHarness(t, api.HarnessConfig{Keys: []string{"k1"}, Tokens: fakeTokens{}, Log: &logs})
	post := func(header http.Header, body string) (int, map[string]any) {
		rec := serve(t, h, "POST", "/exec", "application/json", body, header)
		var out map[string]any
		_ = json.Unmarshal(rec.Body.Bytes(), &out)
		return rec.Code, out
	}
	bearer := func(v string) http.Header { return http.Header{"Authorization": {"Bearer " + v}} }

	code, a := post(bearer(token("user-a")), `{"code":"1","user_id":"user-b"}`)
	if code != http.StatusOK {
		t.Fatalf("a valid token: %d %v", code, a)
	}
	sid := a["session_id"].(string)
	// The session is user-a's, whatever user_id said: user-b of the same tenant, a user
	// of another tenant and the API key do not see it.
	for name, hdr := range map[string]http.Header{"user-b": bearer(token("user-b")), "user-c": bearer(token("user-c")),
		"the API key": {"X-Api-Key": {"k1"}}} {
		rec := serve(t, h, "GET", "/sessions/"+sid, "", "", hdr)
		if rec.Code != http.StatusNotFound {
			t.Errorf("%s reads user-a's session: %d, want 404", name, rec.Code)
		}
	}
	if rec := serve(t, h, "GET", "/sessions/"+sid, "", "", bearer(token("user-a"))); rec.Code != http.StatusOK {
		t.Errorf("user-a reads its session: %d", rec.Code)
	}
	if code, _ := post(http.Header{"X-Api-Key": {"k1"}}, `{"code":"1"}`); code != http.StatusOK {
		t.Errorf("an API key beside tokens: %d, want 200", code)
	}

	code, body := post(bearer(token("stale")), `{"code":"1"}`)
	if code != http.StatusUnauthorized || strings.Contains(body["message"].(string), "expired") {
		t.Errorf("a refused token: %d %v, want 401 that does not say why", code, body)
	}
	if !strings.Contains(logs.String(), "token expired 5 minutes ago") {
		t.Errorf("the log does not say why the token was refused")
	}
	both := http.Header{"Authorization": {"Bearer " + token("user-a")}, "X-Api-Key": {"k1"}}
	if code, body := post(both, `{"code":"1"}`); code != http.StatusBadRequest {
		t.Errorf("two different credentials: %d %v, want 400", code, body)
	}
	same := http.Header{"Authorization": {"Bearer k1"}, "X-Api-Key": {"k1"}}
	if code, _ := post(same, `{"code":"1"}`); code != http.StatusOK {
		t.Errorf("one key sent twice: %d, want 200", code)
	}
}

// An agent's files are the tenant's to read and their uploader's (or an admin's) to
// delete: another user of the tenant reads them and gets 403 deleting them, by either
// route; the uploader deletes one, an admin the other.
func TestAgentFilesAreDeletedByTheirUploader(t *testing.T) {
	h := api.NewHarness(t, api.HarnessConfig{Keys: []string{"k1"}, Tokens: fakeTokens{}})
	as := func(sub string) http.Header { return http.Header{"Authorization": {"Bearer " + token(sub)}} }
	upload := func() (string, string) {
		ct, body := multipartBody(t, part{"kind", "", "agent"}, part{"id", "", "agent_reports"}, part{"file", "q3.csv", "region,sales\nnorth,10\n"})
		rec := serve(t, h, "POST", "/upload", ct, body, as("user-a"))
		var up struct {
			SessionID string `json:"session_id"`
			Files     []struct {
				FileID string `json:"fileId"`
			} `json:"files"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &up); err != nil || rec.Code != http.StatusOK || len(up.Files) != 1 {
			t.Fatalf("upload: %d %s", rec.Code, rec.Body)
		}
		return up.SessionID, up.Files[0].FileID
	}
	const scope = "?kind=agent&id=agent_reports"
	sid, fid := upload()
	if rec := serve(t, h, "GET", "/download/"+sid+"/"+fid+scope, "", "", as("user-b")); rec.Code != http.StatusOK {
		t.Errorf("user-b reads the agent's file: %d, want 200", rec.Code)
	}
	for _, path := range []string{"/files/" + sid + "/" + fid + scope, "/sessions/" + sid + "/objects/" + fid + scope} {
		checkError(t, serve(t, h, "DELETE", path, "", "", as("user-b")), http.StatusForbidden, kiln.CodeForbidden)
	}
	if rec := serve(t, h, "DELETE", "/files/"+sid+"/"+fid+scope, "", "", as("user-a")); rec.Code != http.StatusNoContent {
		t.Errorf("the uploader deletes its agent file: %d %s, want 204", rec.Code, rec.Body)
	}
	sid, fid = upload()
	if rec := serve(t, h, "DELETE", "/sessions/"+sid+"/objects/"+fid+scope, "", "", as("admin-a")); rec.Code != http.StatusOK {
		t.Errorf("an admin deletes another user's agent file: %d %s, want 200", rec.Code, rec.Body)
	}
}
