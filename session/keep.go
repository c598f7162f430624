package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/store"
)

// touchEvery is how stale a session's last use may get before a run records a new
// one. Recording every run would cost a synced write each; expiry is counted in hours.
const touchEvery = time.Minute

// keep stores what the run produced in its session (a new one when the call has none
// yet), and makes the answer: what the session now holds, and what its state_error
// must say it does not.
func (cl *call) keep() error {
	s, c, ctx, lv, req, res := cl.s, cl.c, cl.keepCtx, cl.link, cl.req, cl.res
	var err error
	out := &ExecResult{Result: res, Files: []*store.File{}, RuntimeStatus: cl.status}
	cl.out = out
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
			cl.noteState()
			return nil
		}
		if sess, err = s.newSession(ctx, c, lv.sid, req.EntityID); err != nil {
			return err
		}
	}
	changed := false // whether the session's record was written since it was read
	if !req.Stateless {
		if changed, err = s.saveState(ctx, sess, cl.x, res); err != nil {
			return err
		}
	}
	saved, err := s.saveOutputs(ctx, sess.ID, res.Files, lv, cl.in.origins)
	if err != nil {
		return err
	}
	// A read-only input the run deleted stays stored, and goes back into the sandbox next
	// time (settle): code may not remove it any more than change it.
	for _, name := range res.DeletedFiles {
		if !cl.in.origins[name].readOnly {
			out.Deleted = append(out.Deleted, name)
		}
	}
	if err := s.forget(ctx, sess.ID, out.Deleted); err != nil {
		return err
	}
	out.Files, out.Inherited, out.ModifiedFrom = saved.files, saved.inherited, saved.modifiedFrom
	if saved.dropped != "" {
		res.Stderr += "\n[kiln] " + saved.dropped + "\n"
		res.Truncated = true
	}
	if now := s.now(); now.Sub(sess.LastUsedAt) >= touchEvery {
		if err := s.store.TouchSession(ctx, sess.ID, now); err != nil {
			return fmt.Errorf("touch session: %w", err)
		}
		changed = true
	}
	out.Session = sess
	if changed {
		if out.Session, err = s.store.Session(ctx, sess.ID); err != nil {
			return fmt.Errorf("reload session: %w", err)
		}
	}
	cl.noteState()
	return nil
}

// noteState makes the answer's state_error say what the session does not keep: what a
// deferred call's capture left out, or that its sandbox ended before one; and what the
// session lost since its last call.
func (cl *call) noteState() {
	res := cl.res
	if cl.deferred {
		cl.out.StatePending = res.Reusable
		notes := cl.bound.StateNotes // what the last capture left out
		if !res.Reusable {
			notes = "the sandbox ended before the state could be captured: the session keeps its state from before this call"
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
	res.StateError = lostNote(cl.lost, res.StateError)
}

// saveState keeps the state the run ended with and reports whether it wrote. The
// executor hands back the state it was given when the run rolled back or its sandbox
// ended before it could say; a state the run left that is nil means the namespace now
// holds nothing to keep, so the session's is dropped: never an older one.
func (s *Service) saveState(ctx context.Context, sess *store.Session, req executor.Request, res *executor.Result) (bool, error) {
	switch {
	case !req.CaptureState, req.Lang != execution.LangPython, res.StateUnchanged: // state is Python's alone
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
