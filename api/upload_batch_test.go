package api_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
)

// batchAnswer is the answer to POST /upload/batch.
type batchAnswer struct {
	Message          string `json:"message"`
	SessionID        string `json:"session_id"`
	StorageSessionID string `json:"storage_session_id"`
	Succeeded        int    `json:"succeeded"`
	Failed           int    `json:"failed"`
	LimitReached     bool   `json:"filesLimitReached"`
	MaxFiles         int    `json:"maxFiles"`
	Files            []struct {
		Status   string `json:"status"`
		Filename string `json:"filename"`
		FileID   string `json:"fileId"`
		Error    string `json:"error"`
	} `json:"files"`
}

// files returns n file parts of field, named fa.txt, fb.txt...
func files(field string, n int) []part {
	var out []part
	for i := range n {
		out = append(out, part{field, "f" + string(rune('a'+i)) + ".txt", "data"})
	}
	return out
}

func TestUploadBatch(t *testing.T) {
	big := strings.Repeat("x", int(api.TestLimits.MaxFileBytes)+1)
	skill := []part{{"kind", "", "skill"}, {"id", "", "skill-1"}, {"version", "", "2"}}
	tests := []struct {
		name       string
		parts      []part
		status     int
		message    string
		want       []string // each file's status and name, "success a.txt"
		limitAt    int      // maxFiles when the batch was cut short; 0 when it was not
		wantErrors []string // the refused files' errors, in order
	}{
		{"all kept", []part{{"file", "a.txt", "a"}, {"file", "b.txt", "b"}}, 200, "success",
			[]string{"success a.txt", "success b.txt"}, 0, nil},
		{"one over the size limit", []part{{"file", "a.txt", "a"}, {"file", "big.bin", big}}, 200, "partial_success",
			[]string{"success a.txt", "error big.bin"}, 0, []string{"File size limit exceeded (1024 bytes)"}},
		{"every file over the size limit", []part{{"file", "big.bin", big}, {"files", `C:\tmp\huge.bin`, big}}, 400, "error",
			[]string{"error big.bin", "error huge.bin"}, 0, []string{"File size limit exceeded (1024 bytes)", "File size limit exceeded (1024 bytes)"}},
		{"names kept apart, directories kept", []part{{"file", "pptx/editing.md", "a"}, {"file", "pptx/editing.md", "b"}}, 200, "success",
			[]string{"success pptx/editing.md", "success pptx/2_editing.md"}, 0, nil},
		{"past the caller's session limit", files("files", api.TestMaxFiles+2), 200, "success",
			[]string{"success fa.txt", "success fb.txt", "success fc.txt"}, api.TestMaxFiles, nil},
		{"a skill's files take more", append(slices.Clone(skill), files("files", api.TestMaxFiles+2)...), 200, "success",
			[]string{"success fa.txt", "success fb.txt", "success fc.txt", "success fd.txt", "success fe.txt"}, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newServer(t)
			ct, body := multipartBody(t, tt.parts...)
			got := decode[batchAnswer](t, serve(t, h, "POST", "/upload/batch", ct, body, nil), tt.status)
			var files, errs []string
			succeeded := 0
			for _, f := range got.Files {
				files = append(files, f.Status+" "+f.Filename)
				if f.Status == "success" {
					succeeded++
					if !kiln.ValidID(f.FileID) || f.Error != "" {
						t.Errorf("got %+v, want a file id and no error", f)
					}
				} else {
					errs = append(errs, f.Error)
					if f.FileID != "" {
						t.Errorf("got %+v, want no file id for a refused file", f)
					}
				}
			}
			if !slices.Equal(files, tt.want) || !slices.Equal(errs, tt.wantErrors) {
				t.Errorf("got files %q, errors %q; want %q, %q", files, errs, tt.want, tt.wantErrors)
			}
			if got.Message != tt.message || got.Succeeded != succeeded || got.Failed != len(got.Files)-succeeded {
				t.Errorf("got message %q, %d succeeded, %d failed; want %q, %d, %d", got.Message, got.Succeeded, got.Failed, tt.message, succeeded, len(got.Files)-succeeded)
			}
			if succeeded > 0 && (!kiln.ValidID(got.SessionID) || got.StorageSessionID != got.SessionID) {
				t.Errorf("got session_id %q and storage_session_id %q, want one session id twice", got.SessionID, got.StorageSessionID)
			}
			if succeeded == 0 && (got.SessionID != "" || got.StorageSessionID != "") {
				t.Errorf("got session %q for a batch that kept nothing, want none", got.SessionID)
			}
			if got.LimitReached != (tt.limitAt > 0) || got.MaxFiles != tt.limitAt {
				t.Errorf("got filesLimitReached %v, maxFiles %d; want %v, %d", got.LimitReached, got.MaxFiles, tt.limitAt > 0, tt.limitAt)
			}
		})
	}
}

// TestUploadBatchKeepsWhatItSays: the files a batch says it kept are in its session,
// under the scope it was uploaded to.
func TestUploadBatchKeepsWhatItSays(t *testing.T) {
	h := newServer(t)
	ct, body := multipartBody(t, part{"kind", "", "agent"}, part{"id", "", "agent-7"}, part{"file", "a.txt", "a"},
		part{"file", "big.bin", strings.Repeat("x", int(api.TestLimits.MaxFileBytes)+1)})
	got := decode[batchAnswer](t, serve(t, h, "POST", "/upload/batch", ct, body, nil), http.StatusOK)
	list := decode[[]map[string]any](t, serve(t, h, "GET", "/files/"+got.SessionID+"?kind=agent&id=agent-7&detail=simple", "", "", nil), http.StatusOK)
	if len(list) != 1 || list[0]["id"] != got.Files[0].FileID || list[0]["name"] != "a.txt" {
		t.Errorf("got %v listed, want a.txt alone, as %s", list, got.Files[0].FileID)
	}
}

func TestUploadBatchRefused(t *testing.T) {
	tests := []struct {
		name   string
		ct     string // the parts' when empty
		parts  []part
		status int
		code   kiln.Code
	}{
		{"JSON", jsonCT, nil, 415, kiln.CodeMediaType},
		{"no file", "", []part{{"note", "", "x"}}, 400, kiln.CodeInvalid},
		{"nothing at all", "", nil, 400, kiln.CodeInvalid},
		{"kind after the files", "", []part{{"file", "a.txt", "a"}, {"kind", "", "agent"}}, 400, kiln.CodeInvalid},
		{"read_only after the files", "", []part{{"file", "a.txt", "a"}, {"read_only", "", "true"}}, 400, kiln.CodeInvalid},
		{"unknown kind", "", []part{{"kind", "", "team"}, {"file", "a.txt", "a"}}, 400, kiln.CodeInvalid},
		{"a skill without a version", "", []part{{"kind", "", "skill"}, {"id", "", "s"}, {"file", "a.txt", "a"}}, 400, kiln.CodeInvalid},
		{"a version for the caller's own", "", []part{{"version", "", "3"}, {"file", "a.txt", "a"}}, 400, kiln.CodeInvalid},
		{"an agent with no id", "", []part{{"kind", "", "agent"}}, 400, kiln.CodeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newServer(t)
			ct, body := tt.ct, `{}`
			if ct == "" {
				ct, body = multipartBody(t, tt.parts...)
			}
			checkError(t, serve(t, h, "POST", "/upload/batch", ct, body, nil), tt.status, tt.code)
			if list := decode[map[string]any](t, serve(t, h, "GET", "/sessions", "", "", nil), http.StatusOK); len(list["sessions"].([]any)) != 0 {
				t.Errorf("got sessions %v after a refused upload, want none", list["sessions"])
			}
		})
	}
}
