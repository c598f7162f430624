package librechat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// pandasTotals reads sales.csv with pandas, keeps its per-region revenue in `totals`
// and in region_totals.json, and prints the row count and the grand total.
const pandasTotals = `import json
import pandas as pd
df = pd.read_csv("/mnt/data/sales.csv")
df["revenue"] = df.units * df.unit_price_cents
totals = {k: int(v) for k, v in df.groupby("region").revenue.sum().items()}
with open("/mnt/data/region_totals.json", "w") as f:
    json.dump(totals, f, sort_keys=True)
print(len(df), int(df.revenue.sum()))
`

func sum(m map[string]int) int {
	s := 0
	for _, v := range m {
		s += v
	}
	return s
}

func fileNames(t *testing.T, h http.Header, sid, query string) []string {
	t.Helper()
	a := send(t, http.MethodGet, "/files/"+sid+query+"&detail=normalized", h, nil)
	if a.status != http.StatusOK {
		t.Fatalf("GET /files/%s: %d %s", sid, a.status, a.body)
	}
	var list []listed
	a.json(t, &list)
	var names []string
	for _, f := range list {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	return names
}

// intruder is a caller who must not reach alice's files.
type intruder struct {
	name string
	auth func(t testing.TB) http.Header
}

func intruders() []intruder {
	return []intruder{
		{"bob of the same tenant", bob.auth},
		{"bob naming alice in User-Id", func(t testing.TB) http.Header { return with(bob.auth(t), "User-Id", alice.id) }},
		{"carol of another tenant", carol.auth},
		{"alice's id in another tenant", user{"alice@globex", alice.id, "globex"}.auth},
		{"the API key, no user", func(testing.TB) http.Header { return platform() }},
		{"the API key naming alice", func(testing.TB) http.Header { return with(platform(), "User-Id", alice.id) }},
	}
}

func TestUserFilesStayTheirs(t *testing.T) {
	csv, totals := salesCSV(4000)
	up := mustUpload(t, "/upload", alice.auth(t), [][2]string{{"kind", "user"}, {"id", alice.id}}, namedFile{"sales.csv", csv})
	upSID, csvID := up.StorageSessionID, up.Files[0].FileID
	run := exec(t, alice.auth(t), map[string]any{"code": pandasTotals, "user_id": alice.id,
		"files": []fileRef{{ID: csvID, StorageSessionID: upSID, Name: "sales.csv", Kind: "user", ResourceID: alice.id}}})
	if want := fmt.Sprintf("4000 %d\n", sum(totals)); run.Stdout != want {
		t.Fatalf("alice's pandas run: stdout %q, stderr %q, want %q", run.Stdout, run.Stderr, want)
	}
	sid := run.SessionID
	i := slices.IndexFunc(run.Files, func(f fileOut) bool { return f.Name == "region_totals.json" })
	if i < 0 {
		t.Fatalf("region_totals.json not in the run's files: %+v", run.Files)
	}
	outID := run.Files[i].ID
	// A state blob that is not alice's, to try to put into her session.
	other := exec(t, alice.auth(t), map[string]any{"code": "pwned = True"})
	blob := send(t, http.MethodGet, "/state/"+other.SessionID, alice.auth(t), nil)
	if blob.status != http.StatusOK || len(blob.body) == 0 {
		t.Fatalf("GET /state of the other session: %d", blob.status)
	}

	q := scopeQuery("user", alice.id, "")
	for _, in := range intruders() {
		t.Run(in.name, func(t *testing.T) {
			h := in.auth(t)
			for _, detail := range []string{"", "simple", "summary", "full", "normalized"} {
				for _, s := range []string{upSID, sid} {
					a := send(t, http.MethodGet, "/files/"+s+q+"&detail="+detail, h, nil)
					if a.status != http.StatusOK || strings.TrimSpace(string(a.body)) != "[]" {
						t.Errorf("GET /files/%s?detail=%s: %d %s, want 200 []", s, detail, a.status, a.body)
					}
				}
			}
			notFound := []struct{ method, path string }{
				{http.MethodGet, "/download/" + upSID + "/" + csvID + q},
				{http.MethodGet, "/download/" + sid + "/" + outID + q},
				{http.MethodGet, "/sessions/" + upSID + "/objects/" + csvID + q},
				{http.MethodDelete, "/sessions/" + upSID + "/objects/" + csvID + q},
				{http.MethodDelete, "/sessions/" + sid + "/objects/" + outID + q},
				{http.MethodDelete, "/files/" + upSID + "/" + csvID + q},
				{http.MethodDelete, "/files/" + sid + "/" + outID + q},
				{http.MethodGet, "/sessions/" + sid},
				{http.MethodGet, "/state/" + sid},
				{http.MethodGet, "/state/" + sid + "/info"},
				{http.MethodDelete, "/state/" + sid},
				{http.MethodPost, "/sessions/" + sid + "/fork"},
				{http.MethodDelete, "/sessions/" + sid},
				{http.MethodDelete, "/sessions/" + upSID},
			}
			for _, r := range notFound {
				if a := send(t, r.method, r.path, h, nil); a.status != http.StatusNotFound || a.errorCode() != "not_found" {
					t.Errorf("%s %s: %d %s, want 404 not_found", r.method, r.path, a.status, a.body)
				}
			}
			if a := send(t, http.MethodPost, "/state/"+sid, with(h, "Content-Type", "application/octet-stream"), bytes.NewReader(blob.body)); a.status != http.StatusNotFound {
				t.Errorf("POST /state/%s (overwrite alice's state): %d %s, want 404", sid, a.status, a.body)
			}
			// Her session id starts a new session of the intruder's, which holds none of hers.
			res := exec(t, h, map[string]any{"session_id": sid, "user_id": alice.id,
				"code": "import os\nprint(sorted(os.listdir('/mnt/data')), globals().get('totals'))"})
			if res.SessionID == sid || res.Stdout != "[] None\n" {
				t.Errorf("exec with alice's session_id: session %s (hers %s), stdout %q, stderr %q", res.SessionID, sid, res.Stdout, res.Stderr)
			}
			for _, ref := range []fileRef{
				{ID: csvID, StorageSessionID: upSID, Name: "sales.csv", Kind: "user", ResourceID: alice.id},
				{ID: outID, StorageSessionID: sid, Name: "region_totals.json", Kind: "user", ResourceID: alice.id},
			} {
				a := postJSON(t, "/exec", h, map[string]any{"lang": "py", "user_id": alice.id, "files": []fileRef{ref},
					"code": "print(open('/mnt/data/" + ref.Name + "').read()[:80])"})
				if a.status != http.StatusForbidden || a.errorCode() != "forbidden" {
					t.Errorf("exec with a ref to alice's %s: %d %s, want 403 forbidden", ref.Name, a.status, a.body)
				}
			}
			list := send(t, http.MethodGet, "/sessions?limit=200", h, nil)
			if list.status != http.StatusOK || bytes.Contains(list.body, []byte(sid)) || bytes.Contains(list.body, []byte(upSID)) {
				t.Errorf("GET /sessions lists alice's sessions: %d %s", list.status, list.body)
			}
		})
	}

	// Alice still has everything: nothing was read, changed or deleted.
	h := alice.auth(t)
	names := append(fileNames(t, h, upSID, q), fileNames(t, h, sid, q)...)
	for _, want := range []string{"sales.csv", "region_totals.json"} {
		if !slices.Contains(names, want) {
			t.Errorf("alice's files %v lack %s", names, want)
		}
	}
	if a := send(t, http.MethodGet, "/download/"+upSID+"/"+csvID+q, h, nil); a.status != http.StatusOK || !bytes.Equal(a.body, csv) {
		t.Errorf("alice downloads sales.csv: %d, %d bytes, want %d", a.status, len(a.body), len(csv))
	}
	var info struct {
		Size             int64  `json:"size"`
		OriginalFilename string `json:"originalFilename"`
	}
	if a := send(t, http.MethodGet, "/sessions/"+upSID+"/objects/"+csvID+q, h, nil); a.status != http.StatusOK {
		t.Errorf("alice's object info: %d %s", a.status, a.body)
	} else if a.json(t, &info); info.Size != int64(len(csv)) || info.OriginalFilename != "sales.csv" {
		t.Errorf("alice's object info %s", a.body)
	}
	want, _ := json.Marshal(totals) // sorted keys, like json.dump(sort_keys=True) without spaces
	res := exec(t, h, map[string]any{"session_id": sid,
		"code": "import json\nprint(json.dumps(totals, sort_keys=True, separators=(',', ':')), 'pwned' in globals())"})
	if res.SessionID != sid || res.Stdout != string(want)+" False\n" {
		t.Errorf("alice's session afterwards: session %s, stdout %q, stderr %q, want %s False", res.SessionID, res.Stdout, res.Stderr, want)
	}
	if a := send(t, http.MethodGet, "/state/"+sid, h, nil); a.status != http.StatusOK {
		t.Errorf("alice's state: %d", a.status)
	}

	// An upload naming alice's id is still bob's: the id of kind user is the token's.
	planted := mustUpload(t, "/upload", bob.auth(t), [][2]string{{"kind", "user"}, {"id", alice.id}}, namedFile{"sales.csv", []byte("x\n")})
	if got := fileNames(t, alice.auth(t), planted.StorageSessionID, q); len(got) != 0 {
		t.Errorf("alice sees the file bob uploaded naming her: %v", got)
	}
	if got := fileNames(t, bob.auth(t), planted.StorageSessionID, q); !slices.Equal(got, []string{"sales.csv"}) {
		t.Errorf("bob's own upload, naming alice: %v, want [sales.csv]", got)
	}
}

// listed is what the tests read of an entry of GET /files?detail=normalized.
type listed struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	ReadOnly bool   `json:"read_only"`
}

// skillID and agentID name resources as LibreChat does: a skill's MongoDB id, an agent id.
const (
	skillID = "66b1deadbeef00000000c0de"
	agentID = "agent_q3-review"
)

func TestResourceFilesStayInTenant(t *testing.T) {
	brief := []byte("# Q3 review\nCompare each region's revenue with its target.\n")
	targets := []byte("region,target_cents\nnorth,1000000\nsouth,900000\neast,1100000\nwest,950000\n")
	agent := mustUpload(t, "/upload/batch", alice.auth(t), [][2]string{{"kind", "agent"}, {"id", agentID}},
		namedFile{"brief.md", brief}, namedFile{"data/targets.csv", targets})
	skillMD := []byte("---\nname: clean-csv\n---\nRun scripts/clean.py on a CSV.\n")
	script := []byte("import sys\nprint(sys.argv[1].strip().lower())\n")
	skill := mustUpload(t, "/upload/batch", alice.auth(t),
		[][2]string{{"kind", "skill"}, {"id", skillID}, {"version", "2"}, {"read_only", "true"}},
		namedFile{"SKILL.md", skillMD}, namedFile{"scripts/clean.py", script})
	if got := []string{agent.Files[1].Filename, skill.Files[1].Filename}; !slices.Equal(got, []string{"data/targets.csv", "scripts/clean.py"}) {
		t.Errorf("uploaded names %q, want the paths kept (data/targets.csv, scripts/clean.py)", got)
	}
	// Carol's tenant has an agent of the same id, with other files.
	theirs := mustUpload(t, "/upload/batch", carol.auth(t), [][2]string{{"kind", "agent"}, {"id", agentID}},
		namedFile{"brief.md", []byte("# globex brief\n")})

	two := 2
	refs := map[string]fileRef{
		"agent":  {ID: agent.Files[0].FileID, StorageSessionID: agent.StorageSessionID, Name: "brief.md", Kind: "agent", ResourceID: agentID},
		"skill":  {ID: skill.Files[0].FileID, StorageSessionID: skill.StorageSessionID, Name: "SKILL.md", Kind: "skill", ResourceID: skillID, Version: &two},
		"globex": {ID: theirs.Files[0].FileID, StorageSessionID: theirs.StorageSessionID, Name: "brief.md", Kind: "agent", ResourceID: agentID},
	}
	contents := map[string][]byte{"agent": brief, "skill": skillMD, "globex": []byte("# globex brief\n")}
	three := 3
	tests := []struct {
		name    string
		auth    func(t testing.TB) http.Header
		which   string   // the file: its ref and its content
		as      *fileRef // when set, the kind, resource id and version the caller names instead
		visible bool
	}{
		{"bob reads acme's agent files", bob.auth, "agent", nil, true},
		{"bob reads acme's skill files", bob.auth, "skill", nil, true},
		{"alice reads acme's skill files", alice.auth, "skill", nil, true},
		{"carol reads globex's agent files", carol.auth, "globex", nil, true},
		{"carol does not read acme's agent files", carol.auth, "agent", nil, false},
		{"carol does not read acme's skill files", carol.auth, "skill", nil, false},
		{"alice does not read globex's agent files", alice.auth, "globex", nil, false},
		{"bob does not read globex's agent files", bob.auth, "globex", nil, false},
		{"the API key does not read acme's agent files", func(testing.TB) http.Header { return platform() }, "agent", nil, false},
		{"bob naming another skill version", bob.auth, "skill", &fileRef{Kind: "skill", ResourceID: skillID, Version: &three}, false},
		{"bob naming the skill as an agent", bob.auth, "skill", &fileRef{Kind: "agent", ResourceID: skillID}, false},
		{"alice naming the skill's files her own", alice.auth, "skill", &fileRef{Kind: "user", ResourceID: alice.id}, false},
		{"bob naming another agent", bob.auth, "agent", &fileRef{Kind: "agent", ResourceID: "agent_other"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.auth(t)
			ref := refs[tt.which]
			if tt.as != nil {
				ref.Kind, ref.ResourceID, ref.Version = tt.as.Kind, tt.as.ResourceID, tt.as.Version
			}
			q := ref.query()
			list := send(t, http.MethodGet, "/files/"+ref.StorageSessionID+q+"&detail=normalized", h, nil)
			dl := send(t, http.MethodGet, "/download/"+ref.StorageSessionID+"/"+ref.ID+q, h, nil)
			obj := send(t, http.MethodGet, "/sessions/"+ref.StorageSessionID+"/objects/"+ref.ID+q, h, nil)
			run := postJSON(t, "/exec", h, map[string]any{"lang": "py", "files": []fileRef{ref},
				"code": "print(open('/mnt/data/" + ref.Name + "').read(), end='')"})
			if !tt.visible {
				if list.status != http.StatusOK || strings.TrimSpace(string(list.body)) != "[]" {
					t.Errorf("GET /files: %d %s, want 200 []", list.status, list.body)
				}
				for name, a := range map[string]answer{"download": dl, "object info": obj} {
					if a.status != http.StatusNotFound {
						t.Errorf("%s: %d %s, want 404", name, a.status, a.body)
					}
				}
				if run.status != http.StatusForbidden || run.errorCode() != "forbidden" {
					t.Errorf("exec: %d %s, want 403 forbidden", run.status, run.body)
				}
				return
			}
			var files []listed
			list.json(t, &files)
			if list.status != http.StatusOK || !slices.ContainsFunc(files, func(f listed) bool { return f.ID == ref.ID && f.ReadOnly }) {
				t.Errorf("GET /files: %d %s, want %s listed read-only", list.status, list.body, ref.ID)
			}
			if dl.status != http.StatusOK || !bytes.Equal(dl.body, contents[tt.which]) {
				t.Errorf("download: %d %q, want %q", dl.status, dl.body, contents[tt.which])
			}
			if obj.status != http.StatusOK {
				t.Errorf("object info: %d %s", obj.status, obj.body)
			}
			var res execAnswer
			if run.status == http.StatusOK {
				run.json(t, &res)
			}
			if run.status != http.StatusOK || res.Stdout != string(contents[tt.which]) {
				t.Errorf("exec with the ref: %d %s, want stdout %q", run.status, run.body, contents[tt.which])
			}
		})
	}

	t.Run("bob's change to an agent file comes back inherited, the file unchanged", func(t *testing.T) {
		ref := refs["agent"]
		res := exec(t, bob.auth(t), map[string]any{"files": []fileRef{ref}, "code": "with open('/mnt/data/brief.md', 'a') as f:\n" +
			"    f.write('bob was here\\n')\nopen('/mnt/data/notes.md', 'w').write('mine\\n')"})
		var inherited, notes *fileOut
		for i, f := range res.Files {
			switch f.Name {
			case "brief.md":
				inherited = &res.Files[i]
			case "notes.md":
				notes = &res.Files[i]
			}
		}
		if inherited == nil || !inherited.Inherited || inherited.ID != ref.ID || inherited.StorageSessionID != ref.StorageSessionID {
			t.Errorf("brief.md in the answer: %+v, want the agent's file (%s in %s) with inherited: true", inherited, ref.ID, ref.StorageSessionID)
		}
		if notes == nil || notes.Inherited || notes.StorageSessionID == ref.StorageSessionID {
			t.Errorf("notes.md in the answer: %+v, want a new file of bob's own session", notes)
		}
		if got := fileNames(t, alice.auth(t), ref.StorageSessionID, ref.query()); !slices.Equal(got, []string{"brief.md", "data/targets.csv"}) {
			t.Errorf("the agent's files after bob's run: %v", got)
		}
		dl := send(t, http.MethodGet, "/download/"+ref.StorageSessionID+"/"+ref.ID+ref.query(), alice.auth(t), nil)
		if !bytes.Equal(dl.body, brief) {
			t.Errorf("brief.md after bob's run: %q, want %q", dl.body, brief)
		}
	})

	t.Run("bob reads the agent's files and does not delete them; alice, who uploaded them, does", func(t *testing.T) {
		ref := refs["agent"]
		targets := agent.Files[1].FileID
		for _, path := range []string{"/files/" + ref.StorageSessionID + "/" + targets, "/sessions/" + ref.StorageSessionID + "/objects/" + targets} {
			if a := send(t, http.MethodDelete, path+ref.query(), bob.auth(t), nil); a.status != http.StatusForbidden || a.errorCode() != "forbidden" {
				t.Errorf("bob deletes the agent's file (%s): %d %s, want 403", path, a.status, a.body)
			}
		}
		if got := fileNames(t, bob.auth(t), ref.StorageSessionID, ref.query()); !slices.Equal(got, []string{"brief.md", "data/targets.csv"}) {
			t.Errorf("the agent's files after bob's deletes: %v", got)
		}
		if a := send(t, http.MethodDelete, "/files/"+ref.StorageSessionID+"/"+targets+ref.query(), alice.auth(t), nil); a.status != http.StatusNoContent {
			t.Errorf("alice deletes the agent's file she uploaded: %d %s, want 204", a.status, a.body)
		}
		if got := fileNames(t, bob.auth(t), ref.StorageSessionID, ref.query()); !slices.Equal(got, []string{"brief.md"}) {
			t.Errorf("the agent's files after alice's delete: %v, want brief.md", got)
		}
	})
}

func TestAPIKeyAlongsideTokens(t *testing.T) {
	// The platform's key keeps working beside tokens, for its own sessions.
	res := exec(t, with(platform(), "User-Id", "lc-user-1"), map[string]any{"code": "platform_secret = 42\nprint('ok')"})
	if res.Stdout != "ok\n" {
		t.Fatalf("exec with the key: %q %q", res.Stdout, res.Stderr)
	}
	for name, h := range map[string]http.Header{"alice": alice.auth(t), "a user named lc-user-1": user{"x", "lc-user-1", "acme"}.auth(t)} {
		if a := send(t, http.MethodGet, "/sessions/"+res.SessionID, h, nil); a.status != http.StatusNotFound {
			t.Errorf("%s's token reads the key's session: %d, want 404", name, a.status)
		}
	}
	if a := send(t, http.MethodGet, "/sessions/"+res.SessionID, with(platform(), "User-Id", "lc-user-1"), nil); a.status != http.StatusOK {
		t.Errorf("the key reads its session: %d %s", a.status, a.body)
	}

	// A skill primed with the key, no user named, then run: the run's outputs go to a
	// session of the caller's, never into the skill's, which other users share.
	two := 2
	skill := mustUpload(t, "/upload/batch", platform(), [][2]string{{"kind", "skill"}, {"id", skillID}, {"version", "2"}, {"read_only", "true"}},
		namedFile{"SKILL.md", []byte("platform skill\n")})
	ref := fileRef{ID: skill.Files[0].FileID, StorageSessionID: skill.StorageSessionID, Name: "SKILL.md", Kind: "skill", ResourceID: skillID, Version: &two}
	run := exec(t, platform(), map[string]any{"files": []fileRef{ref},
		"code": "skill_run_state = 'left behind'\nopen('/mnt/data/out.txt', 'w').write(open('/mnt/data/SKILL.md').read().upper())"})
	if run.SessionID == skill.StorageSessionID {
		t.Errorf("the key's run with a skill ref ran in the skill's session %s: its state and outputs went into the skill's files", run.SessionID)
	}
	q := scopeQuery("skill", skillID, "2")
	if got := fileNames(t, platform(), skill.StorageSessionID, q); !slices.Equal(got, []string{"SKILL.md"}) {
		t.Errorf("the skill's files after a run: %v, want only SKILL.md", got)
	}
	info := send(t, http.MethodGet, "/sessions/"+skill.StorageSessionID, platform(), nil)
	var sess struct {
		HasState bool `json:"has_state"`
	}
	info.json(t, &sess)
	if sess.HasState {
		t.Errorf("the skill's session has a state after a run: %s", info.body)
	}
}
