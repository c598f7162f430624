package replica

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"

	"github.com/kilnsh/kiln"
)

// The headers of a forwarded request: the replica that sent it, when (Unix seconds), and
// its signature. Every replica of a deployment reads them: they never change.
const (
	PeerHeader      = "X-Kiln-Peer"
	TimeHeader      = "X-Kiln-Peer-Time"
	SignatureHeader = "X-Kiln-Peer-Signature"
)

// ClockSkew is how far a forwarded request's time may be from the receiver's clock, either
// way: replicas' clocks agree to within seconds, and a request replayed later is refused.
const ClockSkew = 60 * time.Second

// signature signs what a forwarded request cannot change without the secret: the sender,
// the time, the method and the target. The body is not signed: the caller's own
// credentials travel with it, and the owner checks them as if the caller had come
// straight to it.
func signature(secret []byte, instance, at, method, target string) string {
	mac := hmac.New(sha256.New, secret)
	for _, part := range []string{"kiln-peer-v1", instance, at, method, target} {
		mac.Write([]byte(part))
		mac.Write([]byte{'\n'})
	}
	return hex.EncodeToString(mac.Sum(nil))
}

// Sign marks out as forwarded by this replica, now.
func (f *Forwarder) Sign(out *http.Request) {
	at := strconv.FormatInt(time.Now().Unix(), 10)
	out.Header.Set(PeerHeader, f.instance)
	out.Header.Set(TimeHeader, at)
	out.Header.Set(SignatureHeader, signature(f.cfg.Secret, f.instance, at, out.Method, out.URL.RequestURI()))
}

// Verify returns the replica that forwarded r, "" when r does not claim to be forwarded.
// A claim whose signature does not hold (another secret, no secret here, a time more
// than ClockSkew away) is a *kiln.Error, CodeUnauthorized, naming the claimed sender.
func (f *Forwarder) Verify(r *http.Request) (from string, err error) {
	from = r.Header.Get(PeerHeader)
	if from == "" {
		return "", nil
	}
	at := r.Header.Get(TimeHeader)
	sig, _ := hex.DecodeString(r.Header.Get(SignatureHeader))
	sec, perr := strconv.ParseInt(at, 10, 64)
	want, _ := hex.DecodeString(signature(f.cfg.Secret, from, at, r.Method, r.URL.RequestURI()))
	skew := time.Since(time.Unix(sec, 0))
	if len(f.cfg.Secret) == 0 || perr != nil || skew > ClockSkew || skew < -ClockSkew || !hmac.Equal(sig, want) {
		return "", kiln.Errorf(kiln.CodeUnauthorized, "the request claims to come from kiln replica %q, and its signature does not hold (PEER_SECRET differs, or the clocks are more than %s apart)", from, ClockSkew)
	}
	return from, nil
}
