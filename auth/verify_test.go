package auth

import (
	"crypto"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var now = time.Unix(1_800_000_000, 0)

// mint builds a token as LibreChat's codeapi.ts does: base64url JSON header and claims,
// signed by hand.
func mint(t *testing.T, header, claims map[string]any, sign func([]byte) []byte) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	input := enc(header) + "." + enc(claims)
	return input + "." + base64.RawURLEncoding.EncodeToString(sign([]byte(input)))
}

func libreChatClaims() map[string]any {
	t := now.Unix()
	return map[string]any{"iss": "librechat", "aud": "codeapi", "sub": "user-1", "iat": t, "nbf": t, "exp": t + 300,
		"jti": "0b5a6f0e-2d6c-4b8a-9c39-3f1d2a7b6c11", "tenant_id": "acme", "role": "USER",
		"principal_source": "librechat_jwt", "auth_context_hash": strings.Repeat("ab", 32)}
}

type keys struct {
	edPriv  ed25519.PrivateKey
	rsaPriv *rsa.PrivateKey
	secret  []byte
}

func newKeys(t *testing.T) keys {
	t.Helper()
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	r, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return keys{edPriv: ed, rsaPriv: r, secret: []byte(strings.Repeat("s", 32))}
}

func (k keys) ed(b []byte) []byte { return ed25519.Sign(k.edPriv, b) }
func (k keys) rs(b []byte) []byte {
	s := sha256.Sum256(b)
	sig, _ := rsa.SignPKCS1v15(rand.Reader, k.rsaPriv, crypto.SHA256, s[:])
	return sig
}
func (k keys) hs(b []byte) []byte { m := hmac.New(sha256.New, k.secret); m.Write(b); return m.Sum(nil) }
func noSig([]byte) []byte         { return nil }
func (k keys) verifier(t *testing.T, algs ...string) *Verifier {
	t.Helper()
	ks := map[string]Key{
		"lc-codeapi-2026-05": {Key: k.edPriv.Public().(ed25519.PublicKey)},
		"rsa-1":              {Key: &k.rsaPriv.PublicKey},
		"hs-1":               {Key: k.secret, Alg: HS256},
	}
	if len(algs) == 0 {
		algs = []string{EdDSA, RS256}
		delete(ks, "hs-1")
	}
	v, err := New(Config{Keys: ks, Issuer: "librechat", Audience: "codeapi", Algorithms: algs, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestVerify(t *testing.T) {
	k := newKeys(t)
	v := k.verifier(t)
	ed := map[string]any{"alg": "EdDSA", "typ": "JWT", "kid": "lc-codeapi-2026-05"}
	with := func(change func(c map[string]any)) map[string]any {
		c := libreChatClaims()
		change(c)
		return c
	}
	header := func(change func(h map[string]any)) map[string]any {
		h := maps.Clone(ed)
		change(h)
		return h
	}
	good := mint(t, ed, libreChatClaims(), k.ed)
	tests := []struct {
		name, token, reason string
	}{
		{"EdDSA as LibreChat mints it", good, ""},
		{"the same token again (jti reuse is fine)", good, ""},
		{"RS256", mint(t, map[string]any{"alg": "RS256", "typ": "JWT", "kid": "rsa-1"}, libreChatClaims(), k.rs), ""},
		{"no tenant: legacy", mint(t, ed, with(func(c map[string]any) { delete(c, "tenant_id") }), k.ed), ""},
		{"aud as a list", mint(t, ed, with(func(c map[string]any) { c["aud"] = []string{"other", "codeapi"} }), k.ed), ""},
		{"29 s late", mint(t, ed, with(func(c map[string]any) {
			c["iat"], c["nbf"], c["exp"] = now.Unix()-329, now.Unix()-329, now.Unix()-29
		}), k.ed), ""},
		{"expired", mint(t, ed, with(func(c map[string]any) {
			c["iat"], c["nbf"], c["exp"] = now.Unix()-400, now.Unix()-400, now.Unix()-100
		}), k.ed), "expired"},
		{"not yet valid", mint(t, ed, with(func(c map[string]any) {
			c["iat"], c["nbf"], c["exp"] = now.Unix(), now.Unix()+120, now.Unix()+200
		}), k.ed), "not_yet_valid"},
		{"issued in the future", mint(t, ed, with(func(c map[string]any) {
			c["iat"], c["nbf"], c["exp"] = now.Unix()+100, now.Unix(), now.Unix()+200
		}), k.ed), "future_iat"},
		{"a lifetime over 300 s", mint(t, ed, with(func(c map[string]any) { c["exp"] = now.Unix() + 3600 }), k.ed), "too_long"},
		{"wrong audience", mint(t, ed, with(func(c map[string]any) { c["aud"] = "other" }), k.ed), "wrong_audience"},
		{"wrong issuer", mint(t, ed, with(func(c map[string]any) { c["iss"] = "evil" }), k.ed), "wrong_issuer"},
		{"unknown kid", mint(t, header(func(h map[string]any) { h["kid"] = "nope" }), libreChatClaims(), k.ed), "unknown_kid"},
		{"no kid", mint(t, header(func(h map[string]any) { delete(h, "kid") }), libreChatClaims(), k.ed), "no_kid"},
		{"tampered", strings.Replace(good, good[strings.Index(good, ".")+5:strings.Index(good, ".")+9], "AAAA", 1), "bad_signature"},
		{"another key's signature", mint(t, ed, libreChatClaims(), newKeys(t).ed), "bad_signature"},
		{"alg none", mint(t, header(func(h map[string]any) { h["alg"] = "none" }), libreChatClaims(), noSig), "wrong_alg"},
		{"HS256 when not allowed", mint(t, map[string]any{"alg": "HS256", "typ": "JWT", "kid": "lc-codeapi-2026-05"}, libreChatClaims(), k.hs), "wrong_alg"},
		{"RS256 with the EdDSA key's kid", mint(t, map[string]any{"alg": "RS256", "typ": "JWT", "kid": "lc-codeapi-2026-05"}, libreChatClaims(), k.rs), "wrong_alg"},
		{"typ not JWT", mint(t, header(func(h map[string]any) { h["typ"] = "at+jwt" }), libreChatClaims(), k.ed), "malformed"},
		{"no sub", mint(t, ed, with(func(c map[string]any) { delete(c, "sub") }), k.ed), "missing_claim"},
		{"no jti", mint(t, ed, with(func(c map[string]any) { delete(c, "jti") }), k.ed), "missing_claim"},
		{"no exp", mint(t, ed, with(func(c map[string]any) { delete(c, "exp") }), k.ed), "missing_claim"},
		{"an unknown principal_source", mint(t, ed, with(func(c map[string]any) { c["principal_source"] = "api_key" }), k.ed), "missing_claim"},
		{"no auth_context_hash", mint(t, ed, with(func(c map[string]any) { delete(c, "auth_context_hash") }), k.ed), "missing_claim"},
		{"an empty tenant", mint(t, ed, with(func(c map[string]any) { c["tenant_id"] = "" }), k.ed), "missing_claim"},
		{"not a token", "an-api-key", "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := v.Verify(tt.token)
			var ae *Error
			switch {
			case tt.reason == "" && err != nil:
				t.Fatalf("got %v, want the token accepted", err)
			case tt.reason != "" && (!errors.As(err, &ae) || ae.Reason != tt.reason):
				t.Fatalf("got %v, want refused for %s", err, tt.reason)
			case tt.reason == "" && (p.Subject != "user-1" || p.Tenant == ""):
				t.Errorf("got %+v, want user-1 of a tenant", p)
			}
		})
	}
	p, _ := v.Verify(good)
	// The token is accepted until its exp plus the skew: what it opened that lasts ends then.
	if p != (Principal{Tenant: "acme", Subject: "user-1", Role: "USER", Source: "librechat_jwt", TokenID: "0b5a6f0e-2d6c-4b8a-9c39-3f1d2a7b6c11",
		Expires: time.Unix(now.Unix()+300, 0).Add(MaxSkew)}) {
		t.Errorf("principal %+v", p)
	}
	if p, _ := v.Verify(mint(t, ed, with(func(c map[string]any) { delete(c, "tenant_id") }), k.ed)); p.Tenant != "legacy" {
		t.Errorf("a token without tenant_id: tenant %q, want legacy", p.Tenant)
	}
	// HS256, once configured.
	hv := k.verifier(t, EdDSA, RS256, HS256)
	if _, err := hv.Verify(mint(t, map[string]any{"alg": "HS256", "typ": "JWT", "kid": "hs-1"}, libreChatClaims(), k.hs)); err != nil {
		t.Errorf("HS256 when allowed: %v", err)
	}
}

func TestKeys(t *testing.T) {
	k := newKeys(t)
	der, _ := x509.MarshalPKIXPublicKey(k.edPriv.Public())
	edPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	rsaPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&k.rsaPriv.PublicKey)})
	oneLine := strings.ReplaceAll(string(edPEM), "\n", `\n`)
	for name, data := range map[string]string{"PEM": string(edPEM), "PEM on one line": oneLine, "PKCS #1": string(rsaPEM)} {
		if _, err := ParseKey([]byte(data)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	x := base64.RawURLEncoding.EncodeToString(k.edPriv.Public().(ed25519.PublicKey))
	jwks := `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + x + `","kid":"k1","alg":"EdDSA"}]}`
	set, err := ParseJWKS([]byte(jwks))
	if err != nil || set["k1"].Alg != EdDSA {
		t.Fatalf("JWKS: %v %+v", err, set)
	}
	if _, err := ParseJWKS([]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + x + `"}]}`)); err == nil {
		t.Error("a JWKS key without kid was accepted")
	}
	priv := `{"kty":"OKP","crv":"Ed25519","x":"` + x + `","d":"` + base64.RawURLEncoding.EncodeToString(k.edPriv.Seed()) + `"}`
	if _, err := ParseKey([]byte(priv)); err == nil {
		t.Error("a private JWK was accepted")
	}
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "lc-codeapi-2026-05.pem"), edPEM, 0o600)
	_ = os.WriteFile(filepath.Join(dir, "rsa-1.pem"), rsaPEM, 0o600)
	got, err := LoadDir(dir)
	if err != nil || len(got) != 2 || got["rsa-1"].Key == nil {
		t.Fatalf("LoadDir: %v %v", err, got)
	}
	if _, err := New(Config{Keys: got, Issuer: "librechat", Audience: "codeapi", Algorithms: []string{EdDSA, RS256}}); err != nil {
		t.Errorf("New: %v", err)
	}
	weak, _ := rsa.GenerateKey(rand.Reader, 1024)
	if _, err := New(Config{Keys: map[string]Key{"w": {Key: &weak.PublicKey}}, Issuer: "i", Audience: "a", Algorithms: []string{RS256}}); err == nil {
		t.Error("a 1024-bit RSA key was accepted")
	}
}
