package soak

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"slices"
	"sort"

	"github.com/kilnsh/kiln/test/kilntest"
)

// noteData records an answer of a data route (upload, files, download).
func (w *worker) noteData(kind string, a answer, problems []string) {
	w.note(dataObs(kind, a, problems))
}

func dataObs(kind string, a answer, problems []string) obs {
	outcome, cl := fmt.Sprint(a.status), classNone
	if a.err != nil || a.status >= 300 {
		var envl kilntest.ErrorBody
		_ = json.Unmarshal(a.body, &envl)
		outcome, cl = describe(a, envl)
	}
	return obs{Kind: kind, Start: a.start, End: a.end, Outcome: outcome, Class: cl, Problems: problems}
}

// wantStatus is the problem of an answer that is not the status wanted.
func wantStatus(a answer, want int) []string {
	if a.err == nil && a.status == want {
		return nil
	}
	if a.err != nil {
		return []string{fmt.Sprintf("no answer (%v), want %d", a.err, want)}
	}
	return []string{fmt.Sprintf("status %d (%s), want %d", a.status, clip(string(a.body), 200), want)}
}

// upload sends a file of random bytes, which makes a new session, and downloads it
// again; the session joins the pool, holding the file.
func (w *worker) upload() {
	data := make([]byte, 1+w.rng.Intn(48<<10))
	w.rng.Read(data)
	name := fmt.Sprintf("up-%d.bin", w.rng.Intn(1<<30))
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", name)
	_, _ = fw.Write(data)
	_ = mw.Close()
	a := w.s.cl.do(http.MethodPost, "/upload", &buf, http.Header{"Content-Type": {mw.FormDataContentType()}}, dataBound)
	var up struct {
		SessionID string `json:"session_id"`
		Files     []struct {
			FileID   string `json:"fileId"`
			Filename string `json:"filename"`
		} `json:"files"`
	}
	p := wantStatus(a, http.StatusOK)
	if p == nil {
		if err := json.Unmarshal(a.body, &up); err != nil || up.SessionID == "" || len(up.Files) != 1 || up.Files[0].Filename != name {
			p = append(p, fmt.Sprintf("upload answered %s, want one file named %s in a session", clip(string(a.body), 300), name))
		}
	}
	w.noteData("upload", a, p)
	if p != nil {
		return
	}
	m := newModel(up.SessionID)
	m.files[name] = []string{sum(data)}
	w.fetch(m, up.Files[0].FileID, name)
	w.s.sessions.add(m)
}

// fetch downloads a file of m's session and checks its bytes against the model.
func (w *worker) fetch(m *model, fileID, name string) {
	a := w.s.cl.do(http.MethodGet, "/download/"+m.id+"/"+fileID, nil, nil, dataBound)
	p := wantStatus(a, http.StatusOK)
	if p == nil && !slices.Contains(m.files[name], sum(a.body)) {
		p = append(p, fmt.Sprintf("session %s file %s downloaded as %d bytes %s, want one of %s", m.id, name, len(a.body), short(sum(a.body)), shorts(m.files[name])))
	}
	w.noteData("download", a, p)
}

// listed is one entry of GET /files/{session_id}?detail=simple.
type listed struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// files lists a session's files, checks the names against the model, and downloads
// one of them.
func (w *worker) files() {
	m := w.s.sessions.take(w.rng)
	if m == nil {
		w.upload()
		return
	}
	defer w.s.sessions.put(m)
	a := w.s.cl.do(http.MethodGet, "/files/"+m.id+"?detail=simple", nil, nil, dataBound)
	p := wantStatus(a, http.StatusOK)
	var list []listed
	if p == nil {
		if err := json.Unmarshal(a.body, &list); err != nil {
			p = append(p, fmt.Sprintf("listing is not JSON: %v", err))
		}
		p = append(p, m.checkNames(list, false)...)
	}
	w.noteData("files", a, p)
	if p != nil || len(list) == 0 {
		return
	}
	f := list[w.rng.Intn(len(list))]
	w.fetch(m, f.ID, f.Name)
}

// checkNames compares a session's listing with the model: a name the session cannot
// hold, a name listed twice, or one it must hold and does not list is a problem. With
// exact, the model must be certain and the names equal.
func (m *model) checkNames(list []listed, exact bool) []string {
	var p []string
	seen := map[string]bool{}
	for _, f := range list {
		cands := m.files[f.Name]
		if seen[f.Name] || len(cands) == 0 || (len(cands) == 1 && cands[0] == absent) {
			p = append(p, fmt.Sprintf("session %s lists %s (twice or unknown)", m.id, f.Name))
		}
		seen[f.Name] = true
	}
	for name, cands := range m.files {
		if !seen[name] && !slices.Contains(cands, absent) {
			p = append(p, fmt.Sprintf("session %s does not list %s", m.id, name))
		}
	}
	if exact && len(seen) != len(m.files) {
		names := make([]string, 0, len(seen))
		for n := range seen {
			names = append(names, n)
		}
		sort.Strings(names)
		p = append(p, fmt.Sprintf("session %s lists %v, want exactly the model's files", m.id, names))
	}
	return p
}

// verify reads a session back at the end: a run reports its variables and files (the
// last successful call's must all be there), its listing must name exactly those
// files, and each download must be their bytes.
func verify(cl *client, rec *recorder, m *model) {
	body := map[string]any{"code": reportCode, "session_id": m.id, "capture_state": false, "timeout": 20000}
	r := cl.exec(body)
	p := expect(r, "ok", 0, "")
	if p == nil {
		var rep holding
		if r.body.SessionID != m.id {
			p = append(p, fmt.Sprintf("session %s lost: the answer names %s", m.id, r.body.SessionID))
		} else if err := lastJSON(r.body.Stdout, &rep); err != nil {
			p = append(p, err.Error())
		} else {
			p = append(p, m.check(rep)...)
		}
	}
	outcome, c := classify(r)
	rec.add(obs{Kind: "verify run", Start: r.start, End: r.end, Outcome: outcome, Class: c, Problems: p})
	if p != nil {
		return
	}
	a := cl.do(http.MethodGet, "/files/"+m.id+"?detail=simple", nil, nil, dataBound)
	p = wantStatus(a, http.StatusOK)
	var list []listed
	if p == nil {
		_ = json.Unmarshal(a.body, &list)
		p = m.checkNames(list, true)
	}
	rec.add(dataObs("verify files", a, p))
	for _, f := range list {
		a := cl.do(http.MethodGet, "/download/"+m.id+"/"+f.ID, nil, nil, dataBound)
		p := wantStatus(a, http.StatusOK)
		if p == nil && !slices.Equal(m.files[f.Name], []string{sum(a.body)}) {
			p = append(p, fmt.Sprintf("session %s file %s downloaded as %s, want %s", m.id, f.Name, short(sum(a.body)), shorts(m.files[f.Name])))
		}
		rec.add(dataObs("verify download", a, p))
	}
}
