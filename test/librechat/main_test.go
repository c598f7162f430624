// Package librechat drives kiln as LibreChat ships today: every request carries a per-user
// JWT minted as LibreChat's codeapi.ts mints it (EdDSA or RS256, tenant_id, a 300 s
// lifetime), files are scoped to a user, an agent or a skill at one version, and a
// conversation's runtime is named by runtime_session_hint. The Node half
// (test/ptc/node/librechat-jwt.test.mjs) runs @librechat/agents' own code, bash and
// programmatic tools against kiln; the Go half checks with plain HTTP what those tools
// never show: that one user cannot read or delete another's files by any route, that a
// tenant's agent and skill files stay in the tenant, and that every bad token is refused
// with the same 401. One server, which accepts an API key and tokens side by side, is
// shared by the package.
package librechat

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-jose/go-jose/v4"

	"github.com/kilnsh/kiln/test/kilntest"
)

var srv *kilntest.Server

// The API key the shared server accepts beside tokens.
const apiKey = "librechat-platform-key"

// The kids of the signing keys kiln is given: LibreChat's default kid for the Ed25519
// key and a second one for the RSA key, both in a JWKS; and a rotated Ed25519 key read
// from a keys directory, so that tokens of the old and the new key are both accepted.
const (
	edKid      = "lc-codeapi-2026-05"
	rsaKid     = "lc-codeapi-rsa-2026-05"
	rotatedKid = "lc-codeapi-2026-11"
)

// signingKeys are the private keys LibreChat would hold; kiln gets the public halves.
type signingKeys struct {
	ed      ed25519.PrivateKey
	rsa     *rsa.PrivateKey
	rotated ed25519.PrivateKey
}

var keys signingKeys

// jwks is the JWKS of the signing keys, for the tests that start a kiln of their own.
var jwks string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if keys, err = newSigningKeys(); err != nil {
		fmt.Fprintln(os.Stderr, "signing keys:", err)
		return 1
	}
	jwks, err = publicJWKS(keys)
	if err != nil {
		fmt.Fprintln(os.Stderr, "JWKS:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "kiln-jwt-keys-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	rotated, err := publicPEM(keys.rotated.Public())
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, rotatedKid+".pem"), rotated, 0o600)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "keys directory:", err)
		return 1
	}
	return kilntest.Main(m, kilntest.Options{Key: apiKey, Env: []string{
		"POOL_SIZE=2", "API_KEYS=" + apiKey, "QUEUE_TIMEOUT_SECONDS=60", "LIVE_SESSIONS_MAX=4",
		"JWT_JWKS=" + jwks, "JWT_PUBLIC_KEYS_DIR=" + dir,
	}}, &srv)
}

func newSigningKeys() (signingKeys, error) {
	var k signingKeys
	var err error
	if _, k.ed, err = ed25519.GenerateKey(rand.Reader); err != nil {
		return k, err
	}
	if _, k.rotated, err = ed25519.GenerateKey(rand.Reader); err != nil {
		return k, err
	}
	k.rsa, err = rsa.GenerateKey(rand.Reader, 2048)
	return k, err
}

// publicJWKS is the JWKS document kiln verifies with: the Ed25519 and the RSA key, each
// bound to its algorithm.
func publicJWKS(k signingKeys) (string, error) {
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: k.ed.Public(), KeyID: edKid, Algorithm: string(jose.EdDSA), Use: "sig"},
		{Key: &k.rsa.PublicKey, KeyID: rsaKid, Algorithm: string(jose.RS256), Use: "sig"},
	}}
	b, err := json.Marshal(set)
	return string(b), err
}

func publicPEM(key any) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// privatePEMLine is a private key as LibreChat's CODEAPI_JWT_PRIVATE_KEY carries it: a
// PKCS #8 PEM on one line, its newlines written as a literal \n.
func privatePEMLine(key any) (string, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", err
	}
	return strings.ReplaceAll(string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), "\n", `\n`), nil
}
