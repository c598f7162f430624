package session

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
)

func TestUpload(t *testing.T) {
	e := newEnv(t, testLimits)
	uploads := []Upload{
		BytesUpload("../../a.txt", []byte("A")),
		BytesUpload(`dir\b.png`, []byte("B")),
		BytesUpload("pptx/editing.md", []byte("D")),
		BytesUpload("\x00", []byte("C")),
		BytesUpload("empty.json", nil),
	}

	sess, files, err := e.svc.Upload(t.Context(), aliceU1, Target{Entity: "agent"}, uploads)
	if err != nil {
		t.Fatalf("Upload: %v", err)
	}
	if sess.Owner != aliceU1.owner() || sess.EntityID != "agent" {
		t.Errorf("session owner, entity = %q, %q; want %q, %q", sess.Owner, sess.EntityID, aliceU1.owner(), "agent")
	}
	want := []struct{ name, contentType, data string }{
		{"a.txt", ContentType("a.txt"), "A"},
		{"b.png", "image/png", "B"},                              // a path from the client's machine: its last part
		{"pptx/editing.md", "text/markdown; charset=utf-8", "D"}, // a relative path is kept (LibreChat's skills)
		{"file", "application/octet-stream", "C"},
		{"empty.json", "application/json", ""},
	}
	if len(files) != len(want) {
		t.Fatalf("got %d files, want %d", len(files), len(want))
	}
	for i, w := range want {
		f := files[i]
		if f.Name != w.name || f.ContentType != w.contentType || f.SessionID != sess.ID || f.Size != int64(len(w.data)) {
			t.Errorf("file %d = {%q %q %s %d}, want {%q %q %s %d}", i,
				f.Name, f.ContentType, f.SessionID, f.Size, w.name, w.contentType, sess.ID, len(w.data))
		}
		_, data, err := e.svc.File(t.Context(), aliceU1, sess.ID, f.ID)
		if err != nil || string(data) != w.data {
			t.Errorf("File(%s) = %q, %v; want %q", w.name, data, err, w.data)
		}
	}
}

func TestUploadDuplicateNames(t *testing.T) {
	long := strings.Repeat("n", 251) + ".txt" // 255 bytes
	tests := []struct {
		name  string
		names []string
	}{
		{"same name", []string{"a.txt", "a.txt", "a.txt"}},
		{"same name after cleaning", []string{"a.txt", "/a.txt", `./a.txt`}},
		{"same path", []string{"x/a.txt", `x\a.txt`, "x/./a.txt"}},
		{"a name like a renamed one", []string{"a.txt", "a.txt", "2_a.txt"}},
		{"the longest name twice", []string{long, long}},
		{"empty names", []string{"", "", "/"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, testLimits)
			var uploads []Upload
			for i, n := range tt.names {
				uploads = append(uploads, BytesUpload(n, fmt.Appendf(nil, "%d", i)))
			}
			_, files, err := e.svc.Upload(t.Context(), alice, Target{}, uploads)
			if err != nil {
				t.Fatalf("Upload: %v", err)
			}
			seen := map[string]bool{}
			for i, f := range files {
				if seen[f.Name] {
					t.Errorf("name %q given twice", f.Name)
				}
				seen[f.Name] = true
				for _, part := range strings.Split(f.Name, "/") {
					checkSafeName(t, part)
				}
				if i == 0 && f.Name != sanitizePath(tt.names[0]) {
					t.Errorf("first name = %q, want it unchanged: %q", f.Name, sanitizePath(tt.names[0]))
				}
			}
		})
	}
}

func TestUploadRefused(t *testing.T) {
	limits := Limits{MaxFileBytes: 8, MaxFilesPerSession: 3}
	tests := []struct {
		name    string
		uploads []Upload
		want    kiln.Code
	}{
		{"no file", nil, kiln.CodeInvalid},
		{"too many files", []Upload{BytesUpload("a", nil), BytesUpload("b", nil), BytesUpload("c", nil), BytesUpload("d", nil)}, kiln.CodeTooLarge},
		{"a file too large", []Upload{BytesUpload("a", []byte("ok")), BytesUpload("b", []byte("123456789"))}, kiln.CodeTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, limits)
			sess, files, err := e.svc.Upload(t.Context(), alice, Target{Entity: "agent"}, tt.uploads)
			wantCode(t, err, tt.want)
			if sess != nil || files != nil {
				t.Errorf("got session %v and files %v, want none", sess, files)
			}
			if ids := e.sessionIDs(t); len(ids) != 0 {
				t.Errorf("sessions after a refused upload = %v, want none", ids)
			}
		})
	}
}

func TestUploadAtTheLimits(t *testing.T) {
	limits := Limits{MaxFileBytes: 8, MaxFilesPerSession: 3}
	e := newEnv(t, limits)
	full := []byte("12345678")
	_, files, err := e.svc.Upload(t.Context(), alice, Target{}, []Upload{BytesUpload("a", full), BytesUpload("b", full), BytesUpload("c", full)})
	if err != nil {
		t.Fatalf("Upload at the limits: %v", err)
	}
	if len(files) != 3 {
		t.Errorf("got %d files, want 3", len(files))
	}
}

func TestUploadOverTheStoreLimit(t *testing.T) {
	e := newEnv(t, testLimits)
	e.st.maxFile = 2
	_, _, err := e.svc.Upload(t.Context(), alice, Target{}, []Upload{BytesUpload("a.txt", []byte("abc"))})
	wantCode(t, err, kiln.CodeTooLarge)
}

func TestFiles(t *testing.T) {
	e := newEnv(t, testLimits)
	sess := e.session(t, alice, "")
	empty := e.session(t, alice, "")
	a := e.file(t, sess.ID, "a.txt", "A")
	b := e.file(t, sess.ID, "b.txt", "B")
	tests := []struct {
		name string
		sid  string
		want []string
	}{
		{"a session's files", sess.ID, []string{a.ID, b.ID}},
		{"a session without files", empty.ID, []string{}},
		{"an unknown session", kiln.NewID(), []string{}},
		{"a malformed id", "../x", []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list, err := e.svc.Files(t.Context(), alice, tt.sid)
			if err != nil {
				t.Fatalf("Files: %v", err)
			}
			if list == nil {
				t.Fatalf("Files returned nil, want a list")
			}
			got := []string{}
			for _, f := range list {
				got = append(got, f.ID)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Files = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFileNotFound(t *testing.T) {
	e := newEnv(t, testLimits)
	a := e.session(t, alice, "")
	b := e.session(t, alice, "")
	fb := e.file(t, b.ID, "b.txt", "B")
	tests := []struct {
		name     string
		sid, fid string
	}{
		{"a file of another session", a.ID, fb.ID},
		{"an unknown file", a.ID, kiln.NewID()},
		{"an unknown session", kiln.NewID(), fb.ID},
		{"a malformed file id", b.ID, "../" + fb.ID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := e.svc.File(t.Context(), alice, tt.sid, tt.fid)
			wantCode(t, err, kiln.CodeNotFound)
			wantCode(t, e.svc.DeleteFile(t.Context(), alice, tt.sid, tt.fid), kiln.CodeNotFound)
		})
	}
	if _, _, err := e.svc.File(t.Context(), alice, b.ID, fb.ID); err != nil {
		t.Errorf("File after the failed deletes: %v, want it still there", err)
	}
}

func TestDeleteFileLeavesLaterRuns(t *testing.T) {
	e := newEnv(t, testLimits)
	sess := e.session(t, alice, "")
	gone := e.file(t, sess.ID, "gone.txt", "G")
	e.file(t, sess.ID, "kept.txt", "K")

	if err := e.svc.DeleteFile(t.Context(), alice, sess.ID, gone.ID); err != nil {
		t.Fatalf("DeleteFile: %v", err)
	}
	if _, _, err := e.svc.File(t.Context(), alice, sess.ID, gone.ID); kiln.ErrorCode(err) != kiln.CodeNotFound {
		t.Errorf("File after delete: %v, want not_found", err)
	}
	req := execReq()
	req.SessionID = sess.ID
	if _, err := e.svc.Exec(t.Context(), alice, req); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	want := []protocol.File{{Path: "kept.txt", Content: []byte("K")}}
	if got := e.run.only(t).Files; !equalFiles(got, want) {
		t.Errorf("next run got files %v, want %v", got, want)
	}
}

func TestState(t *testing.T) {
	e := newEnv(t, testLimits)
	sess := e.session(t, alice, "")

	blob, got, err := e.svc.State(t.Context(), alice, sess.ID)
	wantCode(t, err, kiln.CodeNotFound)
	if blob != nil || got == nil || got.ID != sess.ID {
		t.Errorf("State without state = %q, %v; want no blob and the session", blob, got)
	}

	e.putState(t, sess.ID, "S1")
	blob, got, err = e.svc.State(t.Context(), alice, sess.ID)
	if err != nil || string(blob) != "S1" || !got.HasState || got.StateSize != 2 {
		t.Errorf("State = %q, %+v, %v; want %q with HasState and size 2", blob, got, err, "S1")
	}

	if err := e.svc.DeleteState(t.Context(), alice, sess.ID); err != nil {
		t.Fatalf("DeleteState: %v", err)
	}
	if e.state(t, sess.ID) != nil {
		t.Errorf("state still stored after DeleteState")
	}
	if err := e.svc.DeleteState(t.Context(), alice, sess.ID); err != nil {
		t.Errorf("DeleteState without state: %v, want nil", err)
	}
}

func TestPutState(t *testing.T) {
	errBad := kiln.Errorf(kiln.CodeInvalid, "state is not an LZ4 frame")
	tests := []struct {
		name      string
		caller    Caller
		checkErr  error
		wantErr   kiln.Code // "" for success
		wantCheck bool      // whether the blob must have been checked
		wantState string
	}{
		{"the owner, a good blob", alice, nil, "", true, "NEW"},
		{"the owner, a bad blob", alice, errBad, kiln.CodeInvalid, true, "OLD"},
		{"another key, a good blob", bob, nil, kiln.CodeNotFound, false, "OLD"},
		{"another key, a bad blob", bob, errBad, kiln.CodeNotFound, false, "OLD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, testLimits)
			sess := e.session(t, alice, "")
			e.putState(t, sess.ID, "OLD")
			checked := false
			e.checkState = func(blob []byte) error {
				checked = true
				if string(blob) != "NEW" {
					return errors.New("check got the wrong blob")
				}
				return tt.checkErr
			}

			got, err := e.svc.PutState(t.Context(), tt.caller, sess.ID, []byte("NEW"))
			if checked != tt.wantCheck {
				t.Errorf("blob checked = %v, want %v", checked, tt.wantCheck)
			}
			if tt.wantErr != "" {
				wantCode(t, err, tt.wantErr)
			} else if err != nil {
				t.Fatalf("PutState: %v", err)
			} else if !got.HasState || got.StateSize != 3 {
				t.Errorf("session after PutState = %+v, want HasState and size 3", got)
			}
			if s := e.state(t, sess.ID); string(s) != tt.wantState {
				t.Errorf("stored state = %q, want %q", s, tt.wantState)
			}
		})
	}
}

func TestDeleteSession(t *testing.T) {
	e := newEnv(t, testLimits)
	sess := e.session(t, alice, "")
	f := e.file(t, sess.ID, "a.txt", "A")
	e.putState(t, sess.ID, "S")

	if err := e.svc.DeleteSession(t.Context(), alice, sess.ID); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	if _, err := e.svc.Session(t.Context(), alice, sess.ID); kiln.ErrorCode(err) != kiln.CodeNotFound {
		t.Errorf("Session after delete: %v, want not_found", err)
	}
	if _, _, err := e.svc.File(t.Context(), alice, sess.ID, f.ID); kiln.ErrorCode(err) != kiln.CodeNotFound {
		t.Errorf("File after delete: %v, want not_found", err)
	}
	if ids := e.sessionIDs(t); len(ids) != 0 {
		t.Errorf("sessions on disk after delete = %v, want none", ids)
	}
	wantCode(t, e.svc.DeleteSession(t.Context(), alice, sess.ID), kiln.CodeNotFound)
}

// Code may delete the session's own files, which then leave it, but not a read-only
// one: it stays stored and is not reported deleted.
func TestRunDeletesOnlyWritableFiles(t *testing.T) {
	e := newEnv(t, testLimits)
	sess, files, err := e.svc.Upload(t.Context(), aliceU1, Target{ReadOnly: true}, []Upload{BytesUpload("keep.csv", []byte("a,b\n1,2\n"))})
	if err != nil {
		t.Fatalf("Upload: %v", err)
	}
	scratch := e.file(t, sess.ID, "scratch.txt", "x")
	e.run.result.DeletedFiles = []string{"keep.csv", "scratch.txt"}
	req := execReq()
	req.SessionID = sess.ID
	req.Files = []FileRef{{ID: files[0].ID, SessionID: sess.ID}, {ID: scratch.ID, SessionID: sess.ID}}
	res, err := e.svc.Exec(t.Context(), aliceU1, req)
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if !slices.Equal(res.Deleted, []string{"scratch.txt"}) {
		t.Errorf("deleted = %q, want only scratch.txt", res.Deleted)
	}
	left, err := e.svc.Files(t.Context(), aliceU1, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].Name != "keep.csv" || !left[0].ReadOnly {
		t.Errorf("the session holds %v, want only the read-only keep.csv", left)
	}
}

// QUOTA_STORAGE_MB: what a caller's sessions hold, files and states, bounds what it may
// add; the refusal says which quota, another caller is not charged, and freeing room
// (deleting a session) lets the caller add again.
func TestStorageQuota(t *testing.T) {
	e := newEnv(t, Limits{MaxFileBytes: 4 << 20, MaxFilesPerSession: 5, MaxStoredBytes: 5 << 20})
	data := make([]byte, 3<<20) // a 3 MB CSV-sized upload
	for i := range data {
		data[i] = byte('0' + i%10)
	}
	first, _, err := e.svc.Upload(t.Context(), alice, Target{}, []Upload{BytesUpload("sales.csv", data)})
	if err != nil {
		t.Fatalf("the first 3 MB: %v", err)
	}
	_, _, err = e.svc.Upload(t.Context(), alice, Target{}, []Upload{BytesUpload("more.csv", data)})
	wantCode(t, err, kiln.CodeTooLarge)
	if err == nil || !strings.Contains(err.Error(), "QUOTA_STORAGE_MB") || !strings.Contains(err.Error(), "3.0 MB already") {
		t.Errorf("refusal %v, want one naming QUOTA_STORAGE_MB and what alice holds", err)
	}
	if _, _, err := e.svc.Upload(t.Context(), bob, Target{}, []Upload{BytesUpload("sales.csv", data)}); err != nil {
		t.Errorf("bob's upload after alice's: %v, want it taken (bob is not charged for alice)", err)
	}
	// A state put counts, less the state it replaces.
	if _, err := e.svc.PutState(t.Context(), alice, first.ID, make([]byte, 1<<20)); err != nil {
		t.Errorf("a 1 MB state within the quota: %v", err)
	}
	if _, err := e.svc.PutState(t.Context(), alice, first.ID, make([]byte, 2<<20+1)); err == nil {
		t.Error("a state taking alice past the quota was stored")
	}
	if err := e.svc.DeleteSession(t.Context(), alice, first.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.svc.Upload(t.Context(), alice, Target{}, []Upload{BytesUpload("more.csv", data)}); err != nil {
		t.Errorf("an upload after alice freed room: %v", err)
	}
}
