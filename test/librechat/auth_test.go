package librechat

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/kilnsh/kiln/test/kilntest"
)

// refusal is the 401 every refused credential gets, whatever the reason: the same error
// and message, nothing about why.
type refusal struct {
	Error     string `json:"error"`
	Message   string `json:"message"`
	RequestID string `json:"request_id"`
}

// assertRefused checks that a is the generic 401: the message of a request with no
// credential at all (want), the three envelope fields and nothing else, a challenge.
func assertRefused(t *testing.T, a answer, want refusal) {
	t.Helper()
	if a.status != http.StatusUnauthorized {
		t.Fatalf("got %d %s, want 401", a.status, a.body)
	}
	var got refusal
	a.json(t, &got)
	var fields map[string]any
	a.json(t, &fields)
	if got.Error != "unauthorized" || got.Message != want.Message || got.RequestID == "" || len(fields) != 3 {
		t.Errorf("got body %s, want {error: unauthorized, message: %q, request_id}", a.body, want.Message)
	}
	if a.header.Get("WWW-Authenticate") == "" {
		t.Errorf("a 401 without WWW-Authenticate")
	}
}

// segments splits a compact token into its three base64url parts.
func segments(t *testing.T, tok string) [3]string {
	t.Helper()
	p := strings.Split(tok, ".")
	if len(p) != 3 {
		t.Fatalf("token %q has %d parts", tok, len(p))
	}
	return [3]string{p[0], p[1], p[2]}
}

func b64json(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

func TestBadTokensAreRefusedAlike(t *testing.T) {
	baseline := send(t, http.MethodGet, "/sessions", nil, nil)
	if baseline.status != http.StatusUnauthorized {
		t.Fatalf("no credential: %d %s, want 401", baseline.status, baseline.body)
	}
	var want refusal
	baseline.json(t, &want)

	now := time.Now()
	changed := func(change func(c map[string]any)) map[string]any {
		c := claims(alice, now)
		change(c)
		return c
	}
	ed := func(c map[string]any) string { return sign(t, jose.EdDSA, edKid, keys.ed, c) }
	good := alice.token(t)
	parts := segments(t, good)
	forged := segments(t, ed(changed(func(c map[string]any) { c["sub"] = bob.id })))
	sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
	sig[len(sig)/2] ^= 0x01
	otherRSA, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	_, otherEd, _ := ed25519.GenerateKey(rand.Reader)
	rsaPublicDER, _ := x509.MarshalPKIXPublicKey(&keys.rsa.PublicKey)
	noneHeader := b64json(map[string]string{"alg": "none", "typ": "JWT", "kid": edKid})

	tests := []struct{ name, token string }{
		{"expired 100 s ago", ed(changed(func(c map[string]any) {
			c["iat"], c["nbf"], c["exp"] = now.Unix()-400, now.Unix()-400, now.Unix()-100
		}))},
		{"valid from 90 s ahead (beyond the 30 s skew)", ed(changed(func(c map[string]any) {
			c["iat"], c["nbf"], c["exp"] = now.Unix()+90, now.Unix()+90, now.Unix()+300
		}))},
		{"nbf 60 s ahead, iat now", ed(changed(func(c map[string]any) { c["nbf"] = now.Unix() + 60 }))},
		{"a lifetime of 301 s", ed(changed(func(c map[string]any) { c["exp"] = now.Unix() + 301 }))},
		{"a lifetime of an hour", ed(changed(func(c map[string]any) { c["exp"] = now.Unix() + 3600 }))},
		{"wrong audience", ed(changed(func(c map[string]any) { c["aud"] = "codeapi-staging" }))},
		{"an audience list without codeapi", ed(changed(func(c map[string]any) { c["aud"] = []string{"a", "b"} }))},
		{"wrong issuer", ed(changed(func(c map[string]any) { c["iss"] = "librechat-evil" }))},
		{"unknown kid", sign(t, jose.EdDSA, "lc-codeapi-2025-01", keys.ed, claims(alice, now))},
		{"no kid", func() string {
			s, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: keys.ed}, (&jose.SignerOptions{}).WithType("JWT"))
			obj, _ := s.Sign([]byte(payload(claims(alice, now))))
			tok, _ := obj.CompactSerialize()
			return tok
		}()},
		{"payload swapped for another user's", parts[0] + "." + forged[1] + "." + parts[2]},
		{"signature tampered", parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString(sig)},
		{"signature removed", parts[0] + "." + parts[1] + "."},
		{"alg none, no signature", noneHeader + "." + parts[1] + "."},
		{"alg none, the signature kept", noneHeader + "." + parts[1] + "." + parts[2]},
		{"no sub", ed(changed(func(c map[string]any) { delete(c, "sub") }))},
		{"no jti", ed(changed(func(c map[string]any) { delete(c, "jti") }))},
		{"no principal_source", ed(changed(func(c map[string]any) { delete(c, "principal_source") }))},
		{"principal_source api_key", ed(changed(func(c map[string]any) { c["principal_source"] = "api_key" }))},
		{"no auth_context_hash", ed(changed(func(c map[string]any) { delete(c, "auth_context_hash") }))},
		{"no exp", ed(changed(func(c map[string]any) { delete(c, "exp") }))},
		{"an empty tenant_id", ed(changed(func(c map[string]any) { c["tenant_id"] = "" }))},
		{"HS256, which is not configured", sign(t, jose.HS256, "hs256", []byte(strings.Repeat("k", 32)), claims(alice, now))},
		{"HS256 keyed with the Ed25519 public key (alg confusion)",
			sign(t, jose.HS256, edKid, []byte(keys.ed.Public().(ed25519.PublicKey)), claims(alice, now))},
		{"HS256 keyed with the RSA public key (alg confusion)", sign(t, jose.HS256, rsaKid, rsaPublicDER, claims(alice, now))},
		{"RS256 signed with another RSA key", sign(t, jose.RS256, rsaKid, otherRSA, claims(alice, now))},
		{"RS256 under the Ed25519 key's kid", sign(t, jose.RS256, edKid, keys.rsa, claims(alice, now))},
		{"EdDSA under the RSA key's kid", sign(t, jose.EdDSA, rsaKid, keys.ed, claims(alice, now))},
		{"EdDSA signed with another Ed25519 key", sign(t, jose.EdDSA, edKid, otherEd, claims(alice, now))},
		{"the rotated key's signature under the old kid", sign(t, jose.EdDSA, edKid, keys.rotated, claims(alice, now))},
		{"three parts that are no token", "abc.def.ghi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertRefused(t, send(t, http.MethodGet, "/sessions", bearer(tt.token), nil), want)
			assertRefused(t, postJSON(t, "/exec", bearer(tt.token), map[string]any{"lang": "py", "code": "print(1)"}), want)
		})
	}
	// The same token, unchanged, is accepted: the cases above fail for their change alone.
	if a := send(t, http.MethodGet, "/sessions", bearer(good), nil); a.status != http.StatusOK {
		t.Fatalf("the untampered token: %d %s, want 200", a.status, a.body)
	}
}

// payload is claims as a JWT's payload.
func payload(c map[string]any) string {
	b, _ := json.Marshal(c)
	return string(b)
}

func TestGoodTokensOfEveryKey(t *testing.T) {
	now := time.Now()
	tenantless := claims(alice, now)
	delete(tenantless, "tenant_id")
	optional := claims(alice, now)
	optional["org_id"], optional["chc_user_id"], optional["plan_id"] = "org-17", "chc-4411", "pro"
	optional["aud"] = []string{"other-service", "codeapi"}
	tests := []struct{ name, token string }{
		{"EdDSA under LibreChat's default kid (JWKS)", sign(t, jose.EdDSA, edKid, keys.ed, claims(alice, now))},
		{"RS256 (JWKS)", sign(t, jose.RS256, rsaKid, keys.rsa, claims(alice, now))},
		{"EdDSA of the rotated key (JWT_PUBLIC_KEYS_DIR)", sign(t, jose.EdDSA, rotatedKid, keys.rotated, claims(alice, now))},
		{"no tenant_id (the default tenant)", sign(t, jose.EdDSA, edKid, keys.ed, tenantless)},
		{"optional claims and an audience list", sign(t, jose.EdDSA, edKid, keys.ed, optional)},
		{"29 s to go", sign(t, jose.EdDSA, edKid, keys.ed, claims(alice, now.Add(-271*time.Second)))},
		{"expired 10 s ago (within the 30 s skew)", sign(t, jose.EdDSA, edKid, keys.ed, claims(alice, now.Add(-310*time.Second)))},
		{"issued 20 s ahead (within the skew)", sign(t, jose.EdDSA, edKid, keys.ed, claims(alice, now.Add(20*time.Second)))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if a := send(t, http.MethodGet, "/sessions", bearer(tt.token), nil); a.status != http.StatusOK {
				t.Errorf("got %d %s, want 200", a.status, a.body)
			}
		})
	}
	// Whichever key signed it, a token of alice's of tenant acme is alice: a session made
	// with an RS256 token is there for the EdDSA one.
	res := exec(t, bearer(sign(t, jose.RS256, rsaKid, keys.rsa, claims(alice, now))), map[string]any{"code": "k = 'rs256'"})
	if a := send(t, http.MethodGet, "/sessions/"+res.SessionID, alice.auth(t), nil); a.status != http.StatusOK {
		t.Errorf("alice's session made with RS256, read with EdDSA: %d %s", a.status, a.body)
	}
	// A token without tenant_id is of the default tenant (legacy), not of acme.
	if a := send(t, http.MethodGet, "/sessions/"+res.SessionID, bearer(sign(t, jose.EdDSA, edKid, keys.ed, tenantless)), nil); a.status != http.StatusNotFound {
		t.Errorf("alice of no tenant reads acme alice's session: %d %s, want 404", a.status, a.body)
	}
}

func TestTokenAndKeyTogetherAreRefused(t *testing.T) {
	for _, h := range []http.Header{
		with(alice.auth(t), "X-Api-Key", apiKey),
		with(bearer("not-a-token"), "X-Api-Key", apiKey),
	} {
		for _, a := range []answer{
			send(t, http.MethodGet, "/sessions", h, nil),
			postJSON(t, "/exec", h, map[string]any{"lang": "py", "code": "print(1)"}),
		} {
			if a.status != http.StatusBadRequest || a.errorCode() != "invalid_request" {
				t.Errorf("a key and a token: got %d %s, want 400 invalid_request", a.status, a.body)
			}
		}
	}
}

func TestTokenIDReuseIsAccepted(t *testing.T) {
	// LibreChat reuses a token for up to 30 s: its jti comes again, and must be accepted.
	tok := alice.token(t)
	var sessions []string
	for i := range 3 {
		res := exec(t, bearer(tok), map[string]any{"code": "print(sum(range(10)))"})
		if res.Stdout != "45\n" {
			t.Fatalf("call %d with the same token: stdout %q", i, res.Stdout)
		}
		sessions = append(sessions, res.SessionID)
	}
	if a := send(t, http.MethodGet, "/sessions/"+sessions[0], bearer(tok), nil); a.status != http.StatusOK {
		t.Errorf("the reused token reads its session: %d %s", a.status, a.body)
	}
}

func TestExecutionProfileHeaders(t *testing.T) {
	type profileError struct {
		Error           string `json:"error"`
		ExpectedProfile string `json:"expected_profile"`
		ActualProfile   string `json:"actual_profile"`
	}
	exec := func(h http.Header) answer {
		return postJSON(t, "/exec", h, map[string]any{"lang": "py", "code": "print('profile')"})
	}
	tests := []struct {
		name     string
		header   http.Header
		status   int
		profile  string // the answer's X-CodeAPI-Execution-Profile
		errCode  string
		expected string
	}{
		{"no header", alice.auth(t), http.StatusOK, "default", "", ""},
		{"default", with(alice.auth(t), "X-CodeAPI-Expected-Profile", "default"), http.StatusOK, "default", "", ""},
		{"stateful", with(alice.auth(t), "X-CodeAPI-Expected-Profile", "stateful"), http.StatusOK, "stateful", "", ""},
		{"bogus", with(alice.auth(t), "X-CodeAPI-Expected-Profile", "bogus"), http.StatusBadRequest, "default",
			"invalid_execution_profile", "bogus"},
		{"repeated", with(alice.auth(t), "X-CodeAPI-Expected-Profile", "default", "X-CodeAPI-Expected-Profile", "default"),
			http.StatusBadRequest, "default", "invalid_execution_profile", "default,default"},
		// The profile is checked before the credential, as LibreChat's code API does.
		{"bogus without a credential", http.Header{"X-CodeAPI-Expected-Profile": {"bogus"}}, http.StatusBadRequest, "default",
			"invalid_execution_profile", "bogus"},
		{"a bridge worker", with(alice.auth(t), "X-CodeAPI-Expected-Profile", "stateful", "X-LibreChat-Code-Worker-ID", "w-1"),
			http.StatusBadRequest, "stateful", "unsupported_capability", "stateful"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := exec(tt.header)
			if a.status != tt.status {
				t.Fatalf("got %d %s, want %d", a.status, a.body, tt.status)
			}
			if got := a.header.Values("X-CodeAPI-Execution-Profile"); !slices.Equal(got, []string{tt.profile}) {
				t.Errorf("X-CodeAPI-Execution-Profile %q, want %q", got, tt.profile)
			}
			if tt.errCode == "" {
				var res execAnswer
				a.json(t, &res)
				if res.Stdout != "profile\n" {
					t.Errorf("stdout %q", res.Stdout)
				}
				return
			}
			var got profileError
			a.json(t, &got)
			if got.Error != tt.errCode || got.ExpectedProfile != tt.expected || got.ActualProfile != tt.profile {
				t.Errorf("got %s, want error %s, expected_profile %q, actual_profile %q", a.body, tt.errCode, tt.expected, tt.profile)
			}
		})
	}
	// Every answer names its profile, an open route's and a refusal's too.
	for _, a := range []answer{send(t, http.MethodGet, "/health", nil, nil), send(t, http.MethodGet, "/sessions", nil, nil)} {
		if got := a.header.Get("X-CodeAPI-Execution-Profile"); got != "default" {
			t.Errorf("answer %d: X-CodeAPI-Execution-Profile %q, want default", a.status, got)
		}
	}
}

// TestCodeAPISettingNames starts a second kiln configured only by the names of
// LibreChat's code API (CODEAPI_JWT_*, CODEAPI_EXECUTION_PROFILE), as an operator
// following LibreChat's docs would, and checks the tokens it accepts and the profile it
// serves. It runs no code, but lets the pool warm up before it stops the server: what
// a stop during the first warm-up leaves behind is not this test's subject.
func TestCodeAPISettingNames(t *testing.T) {
	pub, err := publicPEM(keys.rotated.Public())
	if err != nil {
		t.Fatal(err)
	}
	s, err := kilntest.Start(kilntest.Options{Env: []string{
		"POOL_SIZE=1",
		"CODEAPI_JWT_PUBLIC_KEY=" + strings.ReplaceAll(string(pub), "\n", `\n`),
		"CODEAPI_JWT_KEY_ID=lc-prod-7", "CODEAPI_JWT_ISSUER=https://chat.example.com",
		"CODEAPI_JWT_AUDIENCE=code.example.com", "CODEAPI_JWT_SINGLE_TENANT_ID=solo",
		"CODEAPI_EXECUTION_PROFILE=stateful",
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(60 * time.Second); err != nil {
			t.Errorf("stopping the second kiln: %v", err)
		}
		if left, err := kilntest.Containers(s.Instance); err != nil || len(left) > 0 {
			t.Errorf("the second kiln left containers %v (%v)", left, err)
		}
	})
	get := func(h http.Header) answer {
		t.Helper()
		return sendTo(t, s.URL, http.MethodGet, "/sessions", h, nil)
	}
	now := time.Now()
	theirs := func(change func(c map[string]any)) map[string]any {
		c := claims(alice, now)
		c["iss"], c["aud"] = "https://chat.example.com", "code.example.com"
		if change != nil {
			change(c)
		}
		return c
	}
	good := bearer(sign(t, jose.EdDSA, "lc-prod-7", keys.rotated, theirs(nil)))
	tests := []struct {
		name   string
		header http.Header
		status int
	}{
		{"their issuer, audience and kid", good, http.StatusOK},
		{"LibreChat's default issuer", bearer(sign(t, jose.EdDSA, "lc-prod-7", keys.rotated, claims(alice, now))), http.StatusUnauthorized},
		{"LibreChat's default kid", bearer(sign(t, jose.EdDSA, edKid, keys.rotated, theirs(nil))), http.StatusUnauthorized},
		{"expecting the stateful profile", with(good, "X-CodeAPI-Expected-Profile", "stateful"), http.StatusOK},
		{"expecting the default profile", with(good, "X-CodeAPI-Expected-Profile", "default"), http.StatusConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := get(tt.header)
			if a.status != tt.status {
				t.Errorf("got %d %s, want %d", a.status, a.body, tt.status)
			}
			if got := a.header.Get("X-CodeAPI-Execution-Profile"); got != "stateful" {
				t.Errorf("X-CodeAPI-Execution-Profile %q, want stateful (CODEAPI_EXECUTION_PROFILE)", got)
			}
			if tt.status == http.StatusConflict && a.errorCode() != "execution_profile_mismatch" {
				t.Errorf("got %s, want execution_profile_mismatch", a.body)
			}
		})
	}
	// A token without tenant_id is of CODEAPI_JWT_SINGLE_TENANT_ID's tenant: what it
	// uploads is there for a token naming that tenant, and for no other.
	tenantless := theirs(func(c map[string]any) { delete(c, "tenant_id") })
	up := uploadTo(t, s.URL, "/upload", bearer(sign(t, jose.EdDSA, "lc-prod-7", keys.rotated, tenantless)),
		[][2]string{{"kind", "user"}, {"id", alice.id}}, namedFile{"notes.txt", []byte("solo tenant")})
	for tenant, want := range map[string]int{"solo": 1, "acme": 0} {
		tok := sign(t, jose.EdDSA, "lc-prod-7", keys.rotated, theirs(func(c map[string]any) { c["tenant_id"] = tenant }))
		a := sendTo(t, s.URL, http.MethodGet, "/files/"+up.StorageSessionID+scopeQuery("user", alice.id, ""), bearer(tok), nil)
		var list []any
		a.json(t, &list)
		if a.status != http.StatusOK || len(list) != want {
			t.Errorf("tenant %s lists the tenantless upload: %d %s, want %d files", tenant, a.status, a.body, want)
		}
	}
}
