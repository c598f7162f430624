package replica

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// Replicas of this version and the next check each other's signatures: what is signed,
// and how, stays as it is.
func TestSignatureWireFormat(t *testing.T) {
	mac := hmac.New(sha256.New, testSecret)
	mac.Write([]byte("kiln-peer-v1\nb\n1700000000\nPOST\n/v1/exec?x=1\n"))
	if got, want := signature(testSecret, "b", "1700000000", http.MethodPost, "/v1/exec?x=1"), hex.EncodeToString(mac.Sum(nil)); got != want {
		t.Errorf("signature = %s, want %s", got, want)
	}
	body, cred := sha256.Sum256([]byte(`{"code":"1"}`)), sha256.Sum256([]byte("Bearer k\n"))
	mac = hmac.New(sha256.New, testSecret)
	mac.Write([]byte("kiln-peer-v2\nb\na\n1700000000\nN1\nPOST\n/v1/exec?x=1\n" + hex.EncodeToString(body[:]) + "\n" + hex.EncodeToString(cred[:]) + "\n"))
	got := signatureV2(testSecret, signed{from: "b", to: "a", at: "1700000000", nonce: "N1", method: http.MethodPost,
		target: "/v1/exec?x=1", body: []byte(`{"code":"1"}`), credential: "Bearer k\n"})
	if want := hex.EncodeToString(mac.Sum(nil)); got != want {
		t.Errorf("signatureV2 = %s, want %s", got, want)
	}
}

func TestSign(t *testing.T) {
	req := httptest.NewRequest(http.MethodDelete, "/sessions/abc?force=1", nil)
	req.Header.Set("X-Api-Key", "k")
	before := time.Now().Unix()
	NewForwarder("b", Config{Secret: testSecret}).Sign(req, "a", []byte("body"))
	at := req.Header.Get(TimeHeader)
	sec, err := strconv.ParseInt(at, 10, 64)
	if err != nil || sec < before || sec > time.Now().Unix() {
		t.Fatalf("%s = %q, want the time of signing in Unix seconds", TimeHeader, at)
	}
	nonce := req.Header.Get(NonceHeader)
	if got := req.Header.Get(PeerHeader); got != "b" || len(nonce) < 16 {
		t.Errorf("%s = %q, %s = %q: want b and a random nonce", PeerHeader, got, NonceHeader, nonce)
	}
	if got, want := req.Header.Get(SignatureHeader), signature(testSecret, "b", at, http.MethodDelete, "/sessions/abc?force=1"); got != want {
		t.Errorf("%s = %q, want %q", SignatureHeader, got, want)
	}
	want := signatureV2(testSecret, signed{from: "b", to: "a", at: at, nonce: nonce, method: http.MethodDelete,
		target: "/sessions/abc?force=1", body: []byte("body"), credential: "\nk"})
	if got := req.Header.Get(Signature2Header); got != want {
		t.Errorf("%s = %q, want %q", Signature2Header, got, want)
	}
}

func TestVerify(t *testing.T) {
	now := time.Now()
	const body = `{"code":"print(1)"}`
	// forward is a request b sent to "to": its header as Sign writes it.
	forward := func(secret []byte, to string, at time.Time, method, target, body, key string) http.Header {
		ts := strconv.FormatInt(at.Unix(), 10)
		nonce := strconv.FormatInt(at.UnixNano(), 36) + target + key + to
		h := http.Header{PeerHeader: {"b"}, TimeHeader: {ts}, NonceHeader: {nonce}, "X-Api-Key": {key}}
		h.Set(Signature2Header, signatureV2(secret, signed{from: "b", to: to, at: ts, nonce: nonce, method: method, target: target,
			body: []byte(body), credential: credentialOf(h)}))
		return h
	}
	tests := []struct {
		name     string
		secret   []byte // the receiver's
		header   http.Header
		wantFrom string
		wantErr  bool
	}{
		{"not forwarded", testSecret, http.Header{}, "", false},
		{"signed", testSecret, forward(testSecret, "a", now, http.MethodPost, "/exec", body, "k1"), "b", false},
		{"within the skew", testSecret, forward(testSecret, "a", now.Add(-ClockSkew+5*time.Second), http.MethodPost, "/exec", body, "k1"), "b", false},
		{"another secret", testSecret, forward([]byte("another secret, as long as the right one"), "a", now, http.MethodPost, "/exec", body, "k1"), "", true},
		{"no secret here", nil, forward(nil, "a", now, http.MethodPost, "/exec", body, "k1"), "", true},
		{"too old", testSecret, forward(testSecret, "a", now.Add(-2*ClockSkew), http.MethodPost, "/exec", body, "k1"), "", true},
		{"too far ahead", testSecret, forward(testSecret, "a", now.Add(2*ClockSkew), http.MethodPost, "/exec", body, "k1"), "", true},
		{"another method", testSecret, forward(testSecret, "a", now, http.MethodGet, "/exec", body, "k1"), "", true},
		{"another target", testSecret, forward(testSecret, "a", now, http.MethodPost, "/exec?x=1", body, "k1"), "", true},
		{"another body", testSecret, forward(testSecret, "a", now, http.MethodPost, "/exec", `{"code":"print(2)"}`, "k1"), "", true},
		{"another receiver", testSecret, forward(testSecret, "c", now, http.MethodPost, "/exec", body, "k1"), "", true},
		{"no signature", testSecret, http.Header{PeerHeader: {"b"}, TimeHeader: {strconv.FormatInt(now.Unix(), 10)}, Signature2Header: {"00"}}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/exec", nil)
			req.Header = tt.header
			from, err := NewForwarder("a", Config{Secret: tt.secret}).Verify(req, []byte(body))
			if from != tt.wantFrom || (err != nil) != tt.wantErr {
				t.Fatalf("Verify = %q, %v; want %q, error %v", from, err, tt.wantFrom, tt.wantErr)
			}
			var e *kiln.Error
			if tt.wantErr && (!errors.As(err, &e) || e.Code != kiln.CodeUnauthorized || !strings.Contains(e.Message, `"b"`)) {
				t.Errorf("Verify error %v, want unauthorized naming the replica", err)
			}
		})
	}
	t.Run("another caller", func(t *testing.T) {
		h := forward(testSecret, "a", now, http.MethodPost, "/exec", body, "k1")
		h.Set("X-Api-Key", "k2")
		req := httptest.NewRequest(http.MethodPost, "/exec", nil)
		req.Header = h
		if _, err := NewForwarder("a", Config{Secret: testSecret}).Verify(req, []byte(body)); err == nil {
			t.Error("a forward with another caller's key is accepted")
		}
	})
	t.Run("replayed", func(t *testing.T) {
		f := NewForwarder("a", Config{Secret: testSecret})
		h := forward(testSecret, "a", now, http.MethodPost, "/exec", body, "k1")
		for i, wantErr := range []bool{false, true} {
			req := httptest.NewRequest(http.MethodPost, "/exec", nil)
			req.Header = h.Clone()
			_, err := f.Verify(req, []byte(body))
			if (err != nil) != wantErr || (wantErr && !strings.Contains(err.Error(), "replay")) {
				t.Errorf("delivery %d: %v, want error %v (a replay refused)", i+1, err, wantErr)
			}
		}
	})
	t.Run("a forged version 1 claim", func(t *testing.T) {
		ts := strconv.FormatInt(now.Unix(), 10)
		req := httptest.NewRequest(http.MethodPost, "/exec", nil)
		req.Header = http.Header{PeerHeader: {"b"}, TimeHeader: {ts}, SignatureHeader: {strings.Repeat("0", 64)}}
		if from, err := NewForwarder("a", Config{Secret: testSecret}).Verify(req, []byte(body)); err == nil {
			t.Errorf("Verify = %q, nil; want a forged version 1 signature refused", from)
		}
	})
	t.Run("the version before", func(t *testing.T) {
		// A replica of the version before signs with version 1 alone: its request is served
		// as one that came straight from its caller, with no peer header left on it.
		ts := strconv.FormatInt(now.Unix(), 10)
		req := httptest.NewRequest(http.MethodPost, "/exec", nil)
		req.Header = http.Header{PeerHeader: {"b"}, TimeHeader: {ts}, SignatureHeader: {signature(testSecret, "b", ts, http.MethodPost, "/exec")}}
		from, err := NewForwarder("a", Config{Secret: testSecret}).Verify(req, []byte(body))
		if from != "" || err != nil || req.Header.Get(PeerHeader) != "" || req.Header.Get(SignatureHeader) != "" {
			t.Errorf("Verify = %q, %v, header %v; want a request not forwarded, its peer headers gone", from, err, req.Header)
		}
	})
}
