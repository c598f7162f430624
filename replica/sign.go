package replica

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/kilnsh/kiln"
)

// The headers of a forwarded request: the replica that sent it, when (Unix seconds), a
// nonce, and its signatures. Every replica of a deployment reads them: they never change.
const (
	PeerHeader  = "X-Kiln-Peer"
	TimeHeader  = "X-Kiln-Peer-Time"
	NonceHeader = "X-Kiln-Peer-Nonce"
	// SignatureHeader carries the version 1 signature, which covers neither the body
	// nor the caller: it is still sent, for replicas of the version before, and never
	// trusted (Verify).
	SignatureHeader = "X-Kiln-Peer-Signature"
	// Signature2Header carries the signature Verify checks (signatureV2).
	Signature2Header = "X-Kiln-Peer-Signature-V2"
)

// ClockSkew is how far a forwarded request's time may be from the receiver's clock, either
// way: replicas' clocks agree to within seconds, and a request replayed later is refused.
const ClockSkew = 60 * time.Second

// signature is the version 1 signature: the sender, the time, the method and the target.
func signature(secret []byte, instance, at, method, target string) string {
	mac := hmac.New(sha256.New, secret)
	for _, part := range []string{"kiln-peer-v1", instance, at, method, target} {
		mac.Write([]byte(part))
		mac.Write([]byte{'\n'})
	}
	return hex.EncodeToString(mac.Sum(nil))
}

// signed is what a forwarded request cannot change without the secret.
type signed struct {
	from, to, at, nonce, method, target string
	body                                []byte // the whole body
	credential                          string // credentialOf the request
}

// signatureV2 signs the sender and the receiver (a forward goes to one replica, which
// alone remembers its nonce), the time, the nonce, the method, the target, and digests of
// the body and of the caller's credentials: a captured forward cannot be sent with
// another body, for another caller, to another replica, or twice.
func signatureV2(secret []byte, s signed) string {
	body := sha256.Sum256(s.body)
	cred := sha256.Sum256([]byte(s.credential))
	mac := hmac.New(sha256.New, secret)
	for _, part := range []string{"kiln-peer-v2", s.from, s.to, s.at, s.nonce, s.method, s.target,
		hex.EncodeToString(body[:]), hex.EncodeToString(cred[:])} {
		mac.Write([]byte(part))
		mac.Write([]byte{'\n'})
	}
	return hex.EncodeToString(mac.Sum(nil))
}

// credentialOf is what a request authenticates its caller with, as kiln reads it: its
// Authorization and X-API-Key headers.
func credentialOf(h http.Header) string {
	return h.Get("Authorization") + "\n" + h.Get("X-Api-Key")
}

// Sign marks out as forwarded by this replica to the replica to, now, with body as its
// whole body.
func (f *Forwarder) Sign(out *http.Request, to string, body []byte) {
	at := strconv.FormatInt(time.Now().Unix(), 10)
	nonce := rand.Text()
	out.Header.Set(PeerHeader, f.instance)
	out.Header.Set(TimeHeader, at)
	out.Header.Set(NonceHeader, nonce)
	out.Header.Set(SignatureHeader, signature(f.cfg.Secret, f.instance, at, out.Method, out.URL.RequestURI()))
	out.Header.Set(Signature2Header, signatureV2(f.cfg.Secret, signed{from: f.instance, to: to, at: at, nonce: nonce,
		method: out.Method, target: out.URL.RequestURI(), body: body, credential: credentialOf(out.Header)}))
}

// Verify returns the replica that forwarded r, whose whole body is body; "" when r does
// not claim to be forwarded, or claims it with a good version 1 signature alone (a
// replica of the version before), which Verify does not trust with more: such a request
// is served as one that came straight from its caller, and the peer headers are taken
// off it. A claim whose signature does not hold (another secret, no secret here, a time
// more than ClockSkew away, another body, caller or receiver) or whose nonce came before
// is a *kiln.Error, CodeUnauthorized, naming the claimed sender.
func (f *Forwarder) Verify(r *http.Request, body []byte) (from string, err error) {
	from = r.Header.Get(PeerHeader)
	if from == "" {
		return "", nil
	}
	at, nonce := r.Header.Get(TimeHeader), r.Header.Get(NonceHeader)
	sec, perr := strconv.ParseInt(at, 10, 64)
	if r.Header.Get(Signature2Header) == "" {
		v1, _ := hex.DecodeString(r.Header.Get(SignatureHeader))
		want, _ := hex.DecodeString(signature(f.cfg.Secret, from, at, r.Method, r.URL.RequestURI()))
		if !f.inTime(sec, perr) || !hmac.Equal(v1, want) {
			return "", f.refused(from)
		}
		for _, h := range []string{PeerHeader, TimeHeader, NonceHeader, SignatureHeader} {
			r.Header.Del(h)
		}
		return "", nil
	}
	sig, _ := hex.DecodeString(r.Header.Get(Signature2Header))
	want, _ := hex.DecodeString(signatureV2(f.cfg.Secret, signed{from: from, to: f.instance, at: at, nonce: nonce,
		method: r.Method, target: r.URL.RequestURI(), body: body, credential: credentialOf(r.Header)}))
	if !f.inTime(sec, perr) || nonce == "" || !hmac.Equal(sig, want) {
		return "", f.refused(from)
	}
	if !f.nonces.fresh(nonce, time.Unix(sec, 0).Add(ClockSkew)) {
		return "", kiln.Errorf(kiln.CodeUnauthorized, "the request claims to come from kiln replica %q, and it was received before: a replay is refused", from)
	}
	return from, nil
}

// inTime reports whether a claim can be checked at all: a secret here, and a signing time
// (sec, read with perr) within ClockSkew of now.
func (f *Forwarder) inTime(sec int64, perr error) bool {
	skew := time.Since(time.Unix(sec, 0))
	return len(f.cfg.Secret) > 0 && perr == nil && skew <= ClockSkew && skew >= -ClockSkew
}

// refused is the error of a claim to come from the replica from whose signature does not
// hold.
func (f *Forwarder) refused(from string) error {
	return kiln.Errorf(kiln.CodeUnauthorized, "the request claims to come from kiln replica %q, and its signature does not hold (PEER_SECRET differs, the clocks are more than %s apart, or it was changed on the way)", from, ClockSkew)
}

// nonces remembers the nonces of the forwards a replica accepted, each until its
// signature expires: a second one with the same nonce is a replay.
type nonces struct {
	mu   sync.Mutex
	seen map[string]time.Time // nonce → when its signature expires
	next time.Time            // when expired ones are next swept
}

// fresh records nonce, valid until until, and reports whether it was not seen before.
func (n *nonces) fresh(nonce string, until time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	if n.seen == nil {
		n.seen = map[string]time.Time{}
	}
	if now.After(n.next) {
		for k, exp := range n.seen {
			if now.After(exp) {
				delete(n.seen, k)
			}
		}
		n.next = now.Add(ClockSkew / 4)
	}
	if _, dup := n.seen[nonce]; dup {
		return false
	}
	n.seen[nonce] = until
	return true
}
