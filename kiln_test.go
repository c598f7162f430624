package kiln

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestNewID(t *testing.T) {
	const n = 10000
	seen := make(map[string]bool, n)
	used := map[rune]bool{}
	for range n {
		id := NewID()
		if len(id) != IDLength {
			t.Fatalf("got id %q of length %d, want %d", id, len(id), IDLength)
		}
		for _, c := range id {
			if !strings.ContainsRune(IDAlphabet, c) {
				t.Fatalf("got id %q with %q, want only [A-Za-z0-9_-]", id, c)
			}
			used[c] = true
		}
		if strings.ContainsAny(id, "./") {
			t.Fatalf("got id %q with a dot or slash, want neither", id)
		}
		if !ValidID(id) {
			t.Fatalf("got ValidID(%q) false for a fresh id, want true", id)
		}
		if seen[id] {
			t.Fatalf("got id %q twice in %d draws, want no repeats", id, n)
		}
		seen[id] = true
	}
	// 210,000 symbols drawn: every one of the 64 should have come up.
	if len(used) != len(IDAlphabet) {
		t.Errorf("got %d distinct symbols over %d ids, want all %d", len(used), n, len(IDAlphabet))
	}
}

func TestValidID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"abcdefghijklmnopqrstu", true},
		{"ABCDEFGHIJ0123456789_", true},
		{"---------------------", true},
		{"abcdefghijklmnopqrst", false},   // 20
		{"abcdefghijklmnopqrstuv", false}, // 22
		{"", false},
		{"abcdefghij.lmnopqrstu", false},
		{"abcdefghij/lmnopqrstu", false},
		{"../../../../../etc/pa", false},
		{"abcdefghij lmnopqrstu", false},
		{"abcdefghij*lmnopqrstu", false},
		{"abcdefghijklmnopqrst\n", false},
		{"abcdefghijklmnopqrsté", false}, // 21 bytes with a non-ASCII letter
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.id), func(t *testing.T) {
			if got := ValidID(tt.id); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestValidToken(t *testing.T) {
	tests := []struct {
		s    string
		max  int
		want bool
	}{
		{"agent_1", 40, true},
		{"a", 40, true},
		{strings.Repeat("x", 40), 40, true},
		{strings.Repeat("x", 41), 40, false},
		{"", 40, false},
		{"agent.1", 40, false},
		{"agent:1", 40, false},
		{"ag ent", 40, false},
		{"a%2e", 40, false},
		{"é", 40, false},
		{"Az09_-", 6, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q/%d", tt.s, tt.max), func(t *testing.T) {
			if got := ValidToken(tt.s, tt.max); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestErrorCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Code
	}{
		{"kiln error", Errorf(CodeTooLarge, "body of %d bytes", 5), CodeTooLarge},
		{"wrapped kiln error", fmt.Errorf("exec: %w", Errorf(CodeUnavailable, "busy")), CodeUnavailable},
		{"plain error", errors.New("boom"), CodeInternal},
		{"nil", nil, CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ErrorCode(tt.err); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
	if got := Errorf(CodeInvalid, "bad %s", "id").Error(); got != "invalid_request: bad id" {
		t.Errorf("got %q, want %q", got, "invalid_request: bad id")
	}
}

func TestTimestamp(t *testing.T) {
	tests := []struct {
		in   time.Time
		want string
	}{
		{time.Date(2026, 11, 22, 2, 44, 6, 817_400_000, time.UTC), `"2026-11-22T02:44:06.817Z"`},
		{time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600)), `"2026-01-02T02:04:05.000Z"`},
		{time.Date(2026, 1, 2, 3, 4, 5, 999_999_999, time.UTC), `"2026-01-02T03:04:05.999Z"`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			got, err := json.Marshal(Timestamp(tt.in))
			if err != nil || string(got) != tt.want {
				t.Errorf("got %s, %v, want %s", got, err, tt.want)
			}
			if s := Timestamp(tt.in).String(); `"`+s+`"` != tt.want {
				t.Errorf("String() = %s, want %s unquoted", s, tt.want)
			}
		})
	}
}
