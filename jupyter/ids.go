package jupyter

import (
	"fmt"
	"math/big"
	"strings"

	"github.com/kilnsh/kiln"
)

// Jupyter's clients take a kernel id for a UUID (classic Notebook's routes match only
// that shape), while a kernel is a session whose id is kiln's 21 symbols of 6 bits.
// Those 126 bits fit a UUID's 128, so each id is the other written differently: any
// replica turns a kernel id back into its session's without a table.

var sixtyFour = big.NewInt(64)

// kernelID writes a session's id as a UUID-shaped kernel id.
func kernelID(sessionID string) string {
	v := new(big.Int)
	for i := 0; i < len(sessionID); i++ {
		v.Mul(v, sixtyFour)
		v.Add(v, big.NewInt(int64(strings.IndexByte(kiln.IDAlphabet, sessionID[i]))))
	}
	return kernelIDShape(fmt.Sprintf("%032x", v))
}

// sessionOf reads a kernel id back into its session's id; false for anything kernelID
// did not write, another spelling of one (upper-case hex) included: one session, one
// kernel id.
func sessionOf(id string) (string, bool) {
	h := strings.ReplaceAll(id, "-", "")
	if len(id) != 36 || len(h) != 32 || id != kernelIDShape(h) || h != strings.ToLower(h) {
		return "", false
	}
	v, ok := new(big.Int).SetString(h, 16)
	if !ok || v.BitLen() > 6*kiln.IDLength {
		return "", false
	}
	out := make([]byte, kiln.IDLength)
	m := new(big.Int)
	for i := kiln.IDLength - 1; i >= 0; i-- {
		v.DivMod(v, sixtyFour, m)
		out[i] = kiln.IDAlphabet[m.Int64()]
	}
	return string(out), true
}

// kernelIDShape puts 32 hex digits in the UUID's groups.
func kernelIDShape(h string) string {
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
