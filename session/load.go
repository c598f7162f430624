package session

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/egress"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/store"
)

// load gathers what the call's sandbox is given: the session's newest stored state when
// the call reads it, the session's files it does not hold yet, the link that hears the
// run, and its way out (egress).
func (cl *call) load() error {
	s, x, sess := cl.s, &cl.x, cl.sess
	if !cl.deferred && !cl.readOnly && sess != nil && s.live != nil {
		// A call that captures reads or writes the stored state: the newest, kiln's pending
		// capture stored first (and, for a call in another sandbox, the live namespace
		// captured before that).
		if cl.bound == nil {
			s.captureIdle(sess.ID)
		}
		wrote, err := s.storePending(sess.ID)
		if err != nil {
			return fmt.Errorf("storing the session's state before a call that reads it: %w", err)
		}
		if wrote {
			if sess, err = s.store.Session(cl.ctx, sess.ID); err != nil {
				return fmt.Errorf("reload session: %w", err)
			}
			cl.sess = sess
		}
	}
	if cl.bound == nil && sess != nil && sess.HasState && x.Lang == execution.LangPython { // state is Python's alone
		blob, err := s.store.State(cl.ctx, sess.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("load state: %w", err)
		}
		x.State = blob // checked when it entered kiln: trusted now
	}
	var err error
	if cl.in, err = s.inputs(cl.ctx, cl.c, sess, cl.req.Files, cl.held()); err != nil {
		return err
	}
	x.Files, x.DeleteFiles = cl.in.files, cl.in.gone
	// A new session's id is drawn now, so that the run's start can name it; the
	// session itself is created once there is something to keep.
	lv := &link{s: s, ctx: cl.keepCtx, c: cl.c, req: &cl.req, sess: sess, shown: map[string]shownFile{}}
	if sess != nil {
		lv.sid = sess.ID
	} else {
		lv.sid = kiln.NewID()
	}
	cl.link = lv
	x.Owner = cl.c.Principal()
	if cl.req.Events != nil {
		x.OnStart = func() { lv.start(x.ExecutionID) }
		x.OnEvent = lv.event
	}
	if x.ExecutionID == "" {
		x.ExecutionID = kiln.NewID()
	}
	if s.egress != nil {
		serve, end, err := s.egress.Open(egressCall(cl.c, lv.sid, cl.req.Network))
		if err != nil {
			return kiln.Errorf(kiln.CodeInvalid, "%v", err)
		}
		cl.ends = append(cl.ends, end)
		x.Egress = serve
	}
	return nil
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

// errFileRef refuses a run's file reference the caller may not use: another's, or one
// that is gone (which of the two is not said). It is a 403, as LibreChat's client expects:
// a 404 there reads as "temporarily unavailable, retry".
func errFileRef(id string) error {
	return kiln.Errorf(kiln.CodeForbidden, "unauthorized file reference: file %q is not one this caller may use, or it is gone", id)
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
