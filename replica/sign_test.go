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

// Replicas of this version and the one before check each other's signatures: what is
// signed, and how, stays as it is.
func TestSignatureWireFormat(t *testing.T) {
	mac := hmac.New(sha256.New, testSecret)
	mac.Write([]byte("kiln-peer-v1\nb\n1700000000\nPOST\n/v1/exec?x=1\n"))
	want := hex.EncodeToString(mac.Sum(nil))
	if got := signature(testSecret, "b", "1700000000", http.MethodPost, "/v1/exec?x=1"); got != want {
		t.Errorf("signature = %s, want %s", got, want)
	}
}

func TestSign(t *testing.T) {
	req := httptest.NewRequest(http.MethodDelete, "/sessions/abc?force=1", nil)
	before := time.Now().Unix()
	NewForwarder("b", Config{Secret: testSecret}).Sign(req)
	at := req.Header.Get(TimeHeader)
	sec, err := strconv.ParseInt(at, 10, 64)
	if err != nil || sec < before || sec > time.Now().Unix() {
		t.Fatalf("%s = %q, want the time of signing in Unix seconds", TimeHeader, at)
	}
	if got := req.Header.Get(PeerHeader); got != "b" {
		t.Errorf("%s = %q, want b", PeerHeader, got)
	}
	if got, want := req.Header.Get(SignatureHeader), signature(testSecret, "b", at, http.MethodDelete, "/sessions/abc?force=1"); got != want {
		t.Errorf("%s = %q, want %q", SignatureHeader, got, want)
	}
}

func TestVerify(t *testing.T) {
	now := time.Now()
	signed := func(secret []byte, from string, at time.Time, method, target string) http.Header {
		ts := strconv.FormatInt(at.Unix(), 10)
		return http.Header{PeerHeader: {from}, TimeHeader: {ts}, SignatureHeader: {signature(secret, from, ts, method, target)}}
	}
	tests := []struct {
		name     string
		secret   []byte // the receiver's
		header   http.Header
		wantFrom string
		wantErr  bool
	}{
		{"not forwarded", testSecret, http.Header{}, "", false},
		{"signed", testSecret, signed(testSecret, "b", now, http.MethodPost, "/exec"), "b", false},
		{"within the skew", testSecret, signed(testSecret, "b", now.Add(-ClockSkew+5*time.Second), http.MethodPost, "/exec"), "b", false},
		{"another secret", testSecret, signed([]byte("another secret, as long as the right one"), "b", now, http.MethodPost, "/exec"), "", true},
		{"no secret here", nil, signed(nil, "b", now, http.MethodPost, "/exec"), "", true},
		{"too old", testSecret, signed(testSecret, "b", now.Add(-2*ClockSkew), http.MethodPost, "/exec"), "", true},
		{"too far ahead", testSecret, signed(testSecret, "b", now.Add(2*ClockSkew), http.MethodPost, "/exec"), "", true},
		{"another method", testSecret, signed(testSecret, "b", now, http.MethodGet, "/exec"), "", true},
		{"another target", testSecret, signed(testSecret, "b", now, http.MethodPost, "/exec?x=1"), "", true},
		{"no signature", testSecret, http.Header{PeerHeader: {"b"}, TimeHeader: {strconv.FormatInt(now.Unix(), 10)}}, "", true},
		{"no time", testSecret, http.Header{PeerHeader: {"b"}, SignatureHeader: {signature(testSecret, "b", "", http.MethodPost, "/exec")}}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/exec", nil)
			req.Header = tt.header
			from, err := NewForwarder("a", Config{Secret: tt.secret}).Verify(req)
			if from != tt.wantFrom || (err != nil) != tt.wantErr {
				t.Fatalf("Verify = %q, %v; want %q, error %v", from, err, tt.wantFrom, tt.wantErr)
			}
			var e *kiln.Error
			if tt.wantErr && (!errors.As(err, &e) || e.Code != kiln.CodeUnauthorized || !strings.Contains(e.Message, `"b"`)) {
				t.Errorf("Verify error %v, want unauthorized naming the replica", err)
			}
		})
	}
}
