package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func edPEM(t *testing.T) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(pub)
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func TestJWTSettings(t *testing.T) {
	t.Run("none: tokens off", func(t *testing.T) {
		cleanEnv(t)
		c, err := LoadConfig()
		if v, terr := c.tokens(); err != nil || terr != nil || v != nil {
			t.Errorf("got %v, %v, %v; want no verifier and no error", v, err, terr)
		}
	})
	t.Run("LibreChat's names", func(t *testing.T) {
		cleanEnv(t)
		t.Setenv("CODEAPI_JWT_PUBLIC_KEY", strings.ReplaceAll(edPEM(t), "\n", `\n`))
		t.Setenv("CODEAPI_JWT_KID", "lc-1")
		t.Setenv("CODEAPI_JWT_ISSUER", "my-librechat")
		c, err := LoadConfig()
		if err != nil {
			t.Fatal(err)
		}
		if c.JWTKid != "lc-1" || c.JWTIssuer != "my-librechat" || c.JWTAudience != "codeapi" {
			t.Errorf("got kid %q issuer %q audience %q", c.JWTKid, c.JWTIssuer, c.JWTAudience)
		}
		if v, err := c.tokens(); v == nil || err != nil {
			t.Errorf("got %v, %v; want a verifier", v, err)
		}
	})
	t.Run("kiln's names win", func(t *testing.T) {
		cleanEnv(t)
		t.Setenv("JWT_ISSUER", "kiln-name")
		t.Setenv("CODEAPI_JWT_ISSUER", "alias")
		t.Setenv("JWT_PUBLIC_KEY", edPEM(t))
		c, err := LoadConfig()
		if err != nil || c.JWTIssuer != "kiln-name" {
			t.Errorf("got %q, %v; want kiln-name", c.JWTIssuer, err)
		}
	})
	t.Run("a JWKS file and a directory", func(t *testing.T) {
		cleanEnv(t)
		dir := t.TempDir()
		pub, _, _ := ed25519.GenerateKey(rand.Reader)
		jwks := `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + base64.RawURLEncoding.EncodeToString(pub) + `","kid":"a"}]}`
		path := filepath.Join(dir, "jwks.json")
		if err := os.WriteFile(path, []byte(jwks), 0o600); err != nil {
			t.Fatal(err)
		}
		keys := filepath.Join(dir, "keys")
		_ = os.Mkdir(keys, 0o700)
		_ = os.WriteFile(filepath.Join(keys, "b.pem"), []byte(edPEM(t)), 0o600)
		t.Setenv("JWT_JWKS", path)
		t.Setenv("JWT_PUBLIC_KEYS_DIR", keys)
		if _, err := LoadConfig(); err != nil {
			t.Errorf("got %v", err)
		}
	})
	for _, tt := range []struct {
		name, key, value, want string
	}{
		{"a key that is not one", "JWT_PUBLIC_KEY", "not a key", "JWT_PUBLIC_KEY: neither PEM nor a JWK"},
		{"a JWKS that does not parse", "JWT_JWKS", "{nope", "JWT_JWKS: JWKS"},
		{"an unknown algorithm", "JWT_ALGORITHMS", "ES512", `algorithm "ES512"`},
		{"a short HS256 secret", "JWT_HS256_SECRET", "short", "an HS256 secret must be at least 32 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cleanEnv(t)
			if tt.key == "JWT_ALGORITHMS" {
				t.Setenv("JWT_PUBLIC_KEY", edPEM(t))
			}
			t.Setenv(tt.key, tt.value)
			if _, err := LoadConfig(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error with %q", err, tt.want)
			}
		})
	}
}
