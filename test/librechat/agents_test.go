package librechat

import (
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

// TestLibreChatAgents runs test/ptc/node/librechat-jwt.test.mjs (with the agents package
// test/ptc installs): LibreChat's token minter, codeapi.ts ported to codeapi.mjs, and
// @librechat/agents' code, bash and programmatic tools authenticating with it, for users
// of two tenants. The Node side gets the private keys as LibreChat does, a PEM on one line.
func TestLibreChatAgents(t *testing.T) {
	edPEM, err := privatePEMLine(keys.ed)
	if err != nil {
		t.Fatal(err)
	}
	rsaPEM, err := privatePEMLine(keys.rsa)
	if err != nil {
		t.Fatal(err)
	}
	kilntest.NodeTest(t, "test/ptc/node", "librechat-jwt.test.mjs", "@librechat/agents", "test-ptc-deps",
		"KILN_URL="+srv.URL, "KILN_API_KEY="+apiKey,
		"LC_ED25519_PRIVATE_KEY="+edPEM, "LC_ED25519_KID="+edKid,
		"LC_RSA_PRIVATE_KEY="+rsaPEM, "LC_RSA_KID="+rsaKid)
}
