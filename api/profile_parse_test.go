package api_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/kilnsh/kiln/api"
)

// TestParseProfiles reads EXECUTION_PROFILES as operators write it: names in the order
// given (the first is the one named by default), blanks and repeats ignored, and an
// unknown name or no name at all refused with a message that names what to write.
func TestParseProfiles(t *testing.T) {
	tests := []struct {
		list    string
		want    []string
		wantErr string // part of the error; "" when none
	}{
		{"default", []string{"default"}, ""},
		{"stateful", []string{"stateful"}, ""},
		{"stateful,default", []string{"stateful", "default"}, ""},
		{" default , stateful ", []string{"default", "stateful"}, ""},
		{"default,,stateful,", []string{"default", "stateful"}, ""},
		{"stateful,stateful,default,stateful", []string{"stateful", "default"}, ""},
		{"default,turbo", nil, `unknown execution profile "turbo"`},
		{"Default", nil, `unknown execution profile "Default"`},
		{"", nil, "no execution profile"},
		{" , ,", nil, "no execution profile"},
	}
	for _, tt := range tests {
		t.Run(tt.list, func(t *testing.T) {
			got, err := api.ParseProfiles(tt.list)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), `"default"`) {
					t.Errorf("ParseProfiles(%q) = %q, %v; want an error with %q that names the profiles", tt.list, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("ParseProfiles(%q) = %q, %v; want %q", tt.list, got, err, tt.want)
			}
		})
	}
}
