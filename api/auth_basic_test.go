package api_test

import (
	"encoding/base64"
	"net/http"
	"testing"
)

// TestAuthBasic: with Basic, the key is the user name, or the password when the user
// name is empty (how Prometheus and curl -u :KEY send it); a password beside a user
// name is not looked at.
func TestAuthBasic(t *testing.T) {
	h := newServer(t, "k1")
	tests := []struct {
		userPass string
		status   int
	}{
		{"k1:", http.StatusOK},
		{":k1", http.StatusOK},
		{"k1:anything", http.StatusOK},
		{"k1", http.StatusOK},
		{":wrong", http.StatusUnauthorized},
		{"wrong:k1", http.StatusUnauthorized},
		{":", http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.userPass, func(t *testing.T) {
			hdr := http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte(tt.userPass))}}
			if rec := serve(t, h, "GET", "/sessions", "", "", hdr); rec.Code != tt.status {
				t.Errorf("got %d, want %d (body %s)", rec.Code, tt.status, rec.Body)
			}
		})
	}
}
