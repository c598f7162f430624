package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/egress"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/store"
)

// FileRef names a file to place in /mnt/data: one uploaded or produced earlier.
type FileRef struct {
	ID        string
	SessionID string
	Name      string
	// Scope is whose session SessionID is: the caller's own, or a resource's (a file an
	// agent or a skill brings), read-only to code.
	Scope Scope
}

// ExecRequest is an execution in session mode.
type ExecRequest struct {
	executor.Request
	SessionID string
	EntityID  string
	// RuntimeHint is a client's name for a runtime (LibreChat's runtime_session_hint,
	// one per conversation): the caller's session that carries it is continued, and a
	// new session carries it. It outranks the first file's session and EntityID.
	RuntimeHint string
	Files       []FileRef
	// Stateless means the caller carries the state itself (Request.State): the
	// session is a fresh one that only holds the files the run produces.
	Stateless bool
	// Events, when set, hears the run while it goes: its start once it has a
	// sandbox, its output, and each figure it shows, stored in the session at once.
	// It is called on the request's goroutine and must not block for long.
	Events func(Event)
	// Network is the request's field "network": it narrows the operator's egress policy
	// for this call, or shuts it; nil keeps the policy as it is.
	Network *egress.Network
}

// ExecResult is what an execution did, with the session it used and the files it
// produced, stored under that session. It holds the run's sandbox until Release (of
// the embedded executor.Result), which the caller calls once its answer is out.
type ExecResult struct {
	*executor.Result
	Session *store.Session
	Files   []*store.File
	// Outputs are the run's rich outputs, in order (Output); empty, never nil.
	Outputs []Output
	// RuntimeStatus says where the run went: RuntimeNew, RuntimeReused or RuntimeResumed.
	RuntimeStatus string
	// Inherited are the read-only inputs the run changed: handed back as they were, never
	// stored as new files. ModifiedFrom names, by a stored file's id, the input it is a
	// changed copy of.
	Inherited    []Inherited
	ModifiedFrom map[string]*store.File
	// Deleted are the session's files the run deleted, which left the session: those of
	// Result.DeletedFiles that code may delete (not the read-only ones).
	Deleted []string
	// StatePending says the call answered before its state was stored (it ran in the
	// session's live sandbox, which keeps the namespace): the store gets it within
	// Config.StateSaveDelay of the session's last call, or before the sandbox ends.
	StatePending bool
}

// Inherited is a read-only input a run changed, by the path it had in /mnt/data.
type Inherited struct {
	Path string
	File *store.File
}

// touchEvery is how stale a session's last use may get before a run records a new
// one. Recording every run would cost a synced write each; expiry is counted in hours.
const touchEvery = time.Minute

// Exec runs code in a session: it picks the session (session_id, then the session of
// the first file, then the caller's latest session for the entity, else a new one),
// restores its state, places its files, runs, and saves the new state and the files
// the run produced. A new session is created only once the run is done, so a request
// that fails (validation, a file the caller cannot see, no free sandbox) leaves no
// session behind; in stateless mode, only when the run produced files to keep.
//
// Stateless mode is this same path: the caller carries the state in req.State and gets
// it back in the result's State, and the session only keeps the run's files.
func (s *Service) Exec(ctx context.Context, c Caller, req ExecRequest) (*ExecResult, error) {
	if err := s.validate(&req.Request); err != nil {
		return nil, err
	}
	var sess *store.Session
	var err error
	if req.RuntimeHint != "" && !req.Stateless {
		req.EntityID = runtimeEntity(req.RuntimeHint)
		// Calls that name one runtime before it has a session wait for each other, so
		// that the first creates it and the others continue it: never two sessions.
		release, err := s.hintTurn(ctx, c, req.EntityID)
		if err != nil {
			return nil, err
		}
		if sess, err = s.choose(ctx, c, req); err != nil || sess != nil {
			release()
			if err != nil {
				return nil, err
			}
		} else {
			defer release()
		}
	} else if sess, err = s.choose(ctx, c, req); err != nil {
		return nil, err
	}
	if sess != nil {
		// One call of a session at a time, in the order they came: never two copies of it.
		var release func()
		if sess, release, err = s.turn(ctx, c, sess); err != nil {
			return nil, err
		}
		defer release()
	}
	run := s.prepare(sess, &req)
	if run.refit != nil {
		if err := s.endRefit(run); err != nil {
			s.settleFailed(run)
			return nil, err
		}
	}
	run.deferred = s.defers(run, req)
	if run.bound != nil && run.bound.Pending && !run.deferred {
		// A call that rolls back on an error needs the state before it stored.
		if err := s.flush(run.bound); err != nil {
			s.settleFailed(run)
			return nil, fmt.Errorf("storing the session's state before a call that rolls back: %w", err)
		}
	}
	if !run.live && sess != nil && s.live != nil {
		s.flushIdle(sess.ID) // a call in another sandbox reads the stored state: the newest
	}
	if run.deferred {
		req.Request.CaptureState = false // the REPL captures at the flush
	}
	if run.bound == nil && sess != nil && sess.HasState && req.Lang == executor.LangPython { // state is Python's alone
		blob, err := s.store.State(ctx, sess.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			s.settleFailed(run)
			return nil, fmt.Errorf("load state: %w", err)
		}
		req.State = blob // checked when it entered kiln: trusted now
	}
	in, err := s.inputs(ctx, c, sess, req.Files, run.held())
	if err != nil {
		s.settleFailed(run)
		return nil, err
	}
	req.Request.Files, req.DeleteFiles = in.files, in.gone
	// Persist with a context of our own: a caller who hangs up must not cost the
	// session what its run produced.
	pctx := context.WithoutCancel(ctx)
	// A new session's id is drawn now, so that the run's start can name it; the
	// session itself is created once there is something to keep.
	lv := &link{s: s, ctx: pctx, c: c, req: &req, sess: sess, shown: map[string]shownFile{}}
	if sess != nil {
		lv.sid = sess.ID
	} else {
		lv.sid = kiln.NewID()
	}
	req.Request.Owner = c.Principal()
	if req.Events != nil {
		req.Request.OnStart = func() { lv.start(req.Request.ExecutionID) }
		req.Request.OnEvent = lv.event
	}
	if req.Request.ExecutionID == "" {
		req.Request.ExecutionID = kiln.NewID()
	}

	if s.egress != nil {
		serve, end, err := s.egress.Open(egressCall(c, lv.sid, req.Network))
		if err != nil {
			s.settleFailed(run)
			return nil, kiln.Errorf(kiln.CodeInvalid, "%v", err)
		}
		defer end()
		req.Request.Egress = serve
	}

	res, err := s.run.Run(ctx, req.Request)
	if err != nil {
		s.settleFailed(run)
		return nil, err
	}
	out, err := s.keep(pctx, c, lv, req, res, in.origins)
	if err != nil {
		s.settleFailed(run)
		res.Release()
		return nil, err
	}
	out.RuntimeStatus = run.status
	if run.deferred {
		out.StatePending = res.Reusable
		notes := run.bound.StateNotes // what the stored state leaves out
		if !res.Reusable {
			notes = "the sandbox ended before the state could be stored: the session keeps its state as last stored, " +
				"without what the calls answered with state_pending since then bound"
		}
		switch {
		case res.StateError != nil && notes != "":
			notes = *res.StateError + "; " + notes
		case res.StateError != nil:
			notes = *res.StateError
		}
		if notes != "" {
			res.StateError = &notes
		}
	}
	s.settle(run, req, res, out, in.ids)
	return out, nil
}

// egressCall names a call for the egress policy: the policy file's tenant or key, and
// the caller and session for the audit.
func egressCall(c Caller, sid string, n *egress.Network) egress.Call {
	call := egress.Call{Tenant: c.Tenant, Caller: c.Key, Session: sid, Network: n}
	if c.Tenant != "" {
		call.Caller = "tenant " + c.Tenant
	} else {
		call.Key = c.Key
	}
	if c.User != "" {
		call.Caller += " user " + c.User
	}
	return call
}

// keep stores what a run produced in its session (a new one when the run has none
// yet) and returns the answer.
func (s *Service) keep(ctx context.Context, c Caller, lv *link, req ExecRequest, res *executor.Result, origins map[string]origin) (*ExecResult, error) {
	var err error
	out := &ExecResult{Result: res, Files: []*store.File{}}
	if out.Outputs, err = decodeOutputs(res.Outputs, figureIn(res.Files)); err != nil {
		out.Outputs = []Output{}
		res.Stderr += "\n[kiln] " + err.Error() + "\n"
	}
	if lv.err != nil {
		res.Stderr += "\n[kiln] " + lv.err.Error() + "\n"
	}
	sess := lv.sess
	if sess == nil {
		if req.Stateless && len(res.Files) == 0 {
			out.Session = &store.Session{ID: lv.sid} // names nothing: there is nothing to keep
			return out, nil
		}
		if sess, err = s.newSession(ctx, c, lv.sid, req.EntityID); err != nil {
			return nil, err
		}
	}
	changed := false // whether the session's record was written since it was read
	if !req.Stateless {
		if changed, err = s.saveState(ctx, sess, req.Request, res); err != nil {
			return nil, err
		}
	}
	saved, err := s.saveOutputs(ctx, sess.ID, res.Files, lv, origins)
	if err != nil {
		return nil, err
	}
	// A read-only input the run deleted stays stored, and goes back into the sandbox next
	// time (settle): code may not remove it any more than change it.
	for _, name := range res.DeletedFiles {
		if !origins[name].readOnly {
			out.Deleted = append(out.Deleted, name)
		}
	}
	if err := s.forget(ctx, sess.ID, out.Deleted); err != nil {
		return nil, err
	}
	out.Files, out.Inherited, out.ModifiedFrom = saved.files, saved.inherited, saved.modifiedFrom
	if saved.dropped != "" {
		res.Stderr += "\n[kiln] " + saved.dropped + "\n"
		res.Truncated = true
	}
	if now := s.now(); now.Sub(sess.LastUsedAt) >= touchEvery {
		if err := s.store.TouchSession(ctx, sess.ID, now); err != nil {
			return nil, fmt.Errorf("touch session: %w", err)
		}
		changed = true
	}
	out.Session = sess
	if changed {
		if out.Session, err = s.store.Session(ctx, sess.ID); err != nil {
			return nil, fmt.Errorf("reload session: %w", err)
		}
	}
	return out, nil
}

// saveState keeps the state the run ended with and reports whether it wrote. The
// executor hands back the state it was given when the run rolled back or its sandbox
// ended before it could say; a state the run left that is nil means the namespace now
// holds nothing to keep, so the session's is dropped: never an older one.
func (s *Service) saveState(ctx context.Context, sess *store.Session, req executor.Request, res *executor.Result) (bool, error) {
	switch {
	case !req.CaptureState, req.Lang != executor.LangPython, res.StateUnchanged: // state is Python's alone
	case res.State != nil:
		if bytes.Equal(res.State, req.State) {
			return false, nil
		}
		if err := s.store.PutState(ctx, sess.ID, res.State); err != nil {
			return false, fmt.Errorf("save state: %w", err)
		}
		return true, nil
	case res.StateFromRun && sess.HasState:
		if err := s.store.DeleteState(ctx, sess.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return false, fmt.Errorf("drop state: %w", err)
		}
		return true, nil
	}
	return false, nil
}

// choose finds the session a request continues; nil means a new one is needed.
func (s *Service) choose(ctx context.Context, c Caller, req ExecRequest) (*store.Session, error) {
	if req.Stateless {
		return nil, nil
	}
	try := func(id string) (*store.Session, error) {
		if id == "" {
			return nil, nil
		}
		sess, err := s.Session(ctx, c, id)
		if kiln.ErrorCode(err) == kiln.CodeNotFound || (err == nil && resourceOwned(sess.Owner)) {
			return nil, nil // a resource's session holds its files, never a run's state
		}
		return sess, err
	}
	if sess, err := try(req.SessionID); sess != nil || err != nil {
		return sess, err
	}
	if len(req.Files) > 0 && req.RuntimeHint == "" {
		if sess, err := try(req.Files[0].SessionID); sess != nil || err != nil {
			return sess, err
		}
	}
	if req.EntityID != "" {
		sess, err := s.store.LatestSession(ctx, c.owner(), req.EntityID)
		if err == nil && sess.ExpiresAt.After(s.now()) {
			return sess, nil
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("latest session: %w", err)
		}
	}
	return nil, nil
}

// errFileRef refuses a run's file reference the caller may not use: another's, or one
// that is gone (which of the two is not said). It is a 403, as LibreChat's client expects:
// a 404 there reads as "temporarily unavailable, retry".
func errFileRef(id string) error {
	return kiln.Errorf(kiln.CodeForbidden, "unauthorized file reference: file %q is not one this caller may use, or it is gone", id)
}

// runtimeEntity is the entity a runtime hint's session carries. Hints and entity ids
// never meet: an entity id holds no ':'.
func runtimeEntity(hint string) string { return "rt:" + hint }

// runtimeHint is what a runtime hint may look like (LibreChat's rule).
var runtimeHint = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// ValidRuntimeHint reports whether a client's runtime hint is one kiln accepts.
func ValidRuntimeHint(h string) bool { return runtimeHint.MatchString(h) }

// hintTurn waits for the turn of a runtime that has no session yet.
func (s *Service) hintTurn(ctx context.Context, c Caller, entity string) (func(), error) {
	release, _, err := s.turns.acquire(ctx, "\x00"+c.owner()+"\x00"+entity, s.turnWait)
	if errors.Is(err, errTurnTimeout) {
		return nil, &kiln.Error{Code: kiln.CodeBusy, RetryAfter: s.retryAfter, Message: fmt.Sprintf(
			"runtime %s is busy: its first call ran for the whole queue timeout; retry later", strings.TrimPrefix(entity, "rt:"))}
	}
	return release, err
}

// inputSet is what a run's sandbox is to hold of the session's files: files, the ones
// to place; ids, path -> file id of every one it holds after (placed, or held already);
// origins, the stored file behind each of those paths; gone, the paths a live sandbox
// holds of files the session no longer has.
type inputSet struct {
	files   []protocol.File
	ids     map[string]string
	origins map[string]origin
	gone    []string
}

// origin is the stored file an input path holds, and whether code may change it.
type origin struct {
	file     *store.File
	readOnly bool
}

// inputs gathers the files to place in /mnt/data: the ones named, or else all of the
// session's. A named file the caller cannot see is a 404, not a silent omission. held
// is what a live sandbox holds already (path -> file id): those are not placed again.
func (s *Service) inputs(ctx context.Context, c Caller, sess *store.Session, refs []FileRef, held map[string]string) (inputSet, error) {
	in := inputSet{ids: map[string]string{}, origins: map[string]origin{}}
	if len(refs) == 0 && sess == nil {
		return in, nil
	}
	place := func(name string, f *store.File, readOnly bool) error {
		in.ids[name], in.origins[name] = f.ID, origin{file: f, readOnly: readOnly || f.ReadOnly}
		if held[name] == f.ID {
			return nil
		}
		_, data, err := s.store.File(ctx, f.SessionID, f.ID)
		if err != nil {
			return err
		}
		in.files = append(in.files, protocol.File{Path: name, Content: data})
		return nil
	}
	if len(refs) == 0 {
		list, err := s.store.Files(ctx, sess.ID)
		if err != nil {
			return in, fmt.Errorf("list files: %w", err)
		}
		for _, f := range list {
			if err := place(f.Name, f, false); err != nil {
				delete(in.ids, f.Name) // deleted meanwhile
				delete(in.origins, f.Name)
			}
		}
		for name := range held {
			if _, ok := in.ids[name]; !ok {
				in.gone = append(in.gone, name)
			}
		}
		slices.Sort(in.gone)
		return in, nil
	}
	if len(refs) > s.limits.MaxFilesPerSession {
		return in, kiln.Errorf(kiln.CodeTooLarge, "%d files named; the limit is %d", len(refs), s.limits.MaxFilesPerSession)
	}
	listed := map[string][]*store.File{} // the files of each session named, listed once
	for _, ref := range refs {
		sid := ref.SessionID
		if sid == "" && sess != nil {
			sid = sess.ID
		}
		list, ok := listed[sid]
		if !ok {
			if _, err := s.Session(ctx, c.In(ref.Scope), sid); err != nil {
				return in, errFileRef(ref.ID)
			}
			var err error
			if list, err = s.store.Files(ctx, sid); err != nil {
				return in, fmt.Errorf("list files: %w", err)
			}
			listed[sid] = list
		}
		i := slices.IndexFunc(list, func(f *store.File) bool { return f.ID == ref.ID })
		if i < 0 {
			return in, errFileRef(ref.ID)
		}
		name := list[i].Name
		if ref.Name != "" {
			name = sanitizePath(ref.Name)
		}
		if err := place(name, list[i], ref.Scope.shared()); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return in, errFileRef(ref.ID)
			}
			return in, fmt.Errorf("load file: %w", err)
		}
	}
	return in, nil
}

// forget removes from the session the files of the names a run deleted.
func (s *Service) forget(ctx context.Context, sid string, deleted []string) error {
	if len(deleted) == 0 {
		return nil
	}
	list, err := s.store.Files(ctx, sid)
	if err != nil {
		return fmt.Errorf("list files: %w", err)
	}
	for _, f := range list {
		if slices.Contains(deleted, f.Name) {
			if err := s.store.DeleteFile(ctx, sid, f.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("delete file: %w", err)
			}
		}
	}
	return nil
}

// saveOutputs stores the files a run created or changed, each under a new id. A file
// with the name of one the session holds replaces it. What does not fit the session's
// file limit is reported in stderr, never dropped silently. origins are the run's input
// paths: a read-only one the run changed is handed back as inherited, not stored; a
// stored change of another input names it in modifiedFrom.
func (s *Service) saveOutputs(ctx context.Context, sid string, files []protocol.File, lv *link, origins map[string]origin) (savedOutputs, error) {
	out := savedOutputs{files: []*store.File{}, modifiedFrom: map[string]*store.File{}}
	if len(files) == 0 {
		return out, nil
	}
	existing, err := s.store.Files(ctx, sid)
	if err != nil {
		return out, fmt.Errorf("list files: %w", err)
	}
	byName := map[string][]string{}
	for _, f := range existing {
		byName[f.Name] = append(byName[f.Name], f.ID)
	}
	count := len(existing)
	var dropped []string
	for _, pf := range files {
		name := sanitizePath(pf.Path)
		o, isInput := origins[name]
		if isInput && o.readOnly {
			out.inherited = append(out.inherited, Inherited{Path: name, File: o.file})
			continue
		}
		if f, ok := lv.alreadyShown(name, pf.Content); ok {
			out.files = append(out.files, f) // stored when the run showed it
			continue
		}
		old := byName[name]
		if count-len(old) >= s.limits.MaxFilesPerSession {
			dropped = append(dropped, name)
			continue
		}
		f := &store.File{ID: kiln.NewID(), SessionID: sid, Name: name, ContentType: ContentType(name), CreatedAt: s.now()}
		if err := s.store.PutFile(ctx, f, bytes.NewReader(pf.Content), int64(len(pf.Content))); err != nil {
			if errors.Is(err, store.ErrTooLarge) {
				dropped = append(dropped, name)
				continue
			}
			return out, fmt.Errorf("save file: %w", err)
		}
		for _, id := range old {
			if err := s.store.DeleteFile(ctx, sid, id); err != nil && !errors.Is(err, store.ErrNotFound) {
				return out, fmt.Errorf("replace file: %w", err)
			}
		}
		// An earlier output of this run may be what was replaced: report only files that exist.
		out.files = slices.DeleteFunc(out.files, func(f *store.File) bool { return slices.Contains(old, f.ID) })
		count += 1 - len(old)
		byName[name] = []string{f.ID}
		out.files = append(out.files, f)
		if isInput {
			out.modifiedFrom[f.ID] = o.file
		}
	}
	if len(dropped) > 0 {
		out.dropped = fmt.Sprintf("not kept (session file limit of %d or file size limit): %s",
			s.limits.MaxFilesPerSession, strings.Join(dropped, ", "))
	}
	return out, nil
}

// savedOutputs is what saveOutputs kept, and what it could not keep.
type savedOutputs struct {
	files        []*store.File
	inherited    []Inherited
	modifiedFrom map[string]*store.File
	dropped      string // "" when everything was kept
}
