package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/kilnsh/kiln"
)

// maxFileHeader bounds the JSON line in front of a stored file's bytes.
const maxFileHeader = 64 << 10

// stateName is the file holding the state blob with that hex SHA-256. Naming blobs by
// content lets PutState write the new blob beside the old one and switch by rewriting
// session.json: a crash in between leaves the old, consistent pair.
func stateName(sha string) string { return "state-" + sha + ".bin" }

// State implements Store.
func (d *Disk) State(ctx context.Context, sessionID string) ([]byte, error) {
	if !validIDs(sessionID) {
		return nil, ErrNotFound
	}
	l := d.lock(sessionID)
	l.RLock()
	defer l.RUnlock()
	rec, err := d.readSession(sessionID)
	if err != nil {
		return nil, err
	}
	if rec.StateSHA256 == "" {
		return nil, ErrNotFound
	}
	b, err := os.ReadFile(filepath.Join(d.sessionDir(sessionID), stateName(rec.StateSHA256)))
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	// Writes are atomic, so a blob is whole, and it was checked when it entered kiln:
	// it is trusted. Its size is compared all the same (free), so that a file cut
	// short under kiln is an error rather than a state restored wrong; its SHA-256 is
	// not computed again (6 ms a call for 10 MB, on the path of every session call).
	if int64(len(b)) != rec.StateSize {
		return nil, fmt.Errorf("read state: blob of session %s is damaged: %d bytes, want %d",
			sessionID, len(b), rec.StateSize)
	}
	return b, nil
}

// PutState implements Store.
func (d *Disk) PutState(ctx context.Context, sessionID string, blob []byte) error {
	if !validIDs(sessionID) {
		return ErrNotFound
	}
	l := d.lock(sessionID)
	l.Lock()
	defer l.Unlock()
	rec, err := d.readSession(sessionID)
	if err != nil {
		return err
	}
	sdir := d.sessionDir(sessionID)
	sha := sha256Hex(blob)
	if err := writeAtomic(sdir, stateName(sha), blob); err != nil {
		return fmt.Errorf("put state: %w", err)
	}
	old := rec.StateSHA256
	rec.StateSHA256, rec.StateSize, rec.StateCreatedAt = sha, int64(len(blob)), normTime(time.Time{}, time.Now())
	if err := writeSession(sdir, rec); err != nil {
		return fmt.Errorf("put state: %w", err)
	}
	if old != "" && old != sha {
		if err := os.Remove(filepath.Join(sdir, stateName(old))); err != nil {
			return fmt.Errorf("put state: remove old: %w", err)
		}
	}
	return nil
}

// DeleteState implements Store.
func (d *Disk) DeleteState(ctx context.Context, sessionID string) error {
	if !validIDs(sessionID) {
		return ErrNotFound
	}
	l := d.lock(sessionID)
	l.Lock()
	defer l.Unlock()
	rec, err := d.readSession(sessionID)
	if err != nil {
		return err
	}
	if rec.StateSHA256 == "" {
		return ErrNotFound
	}
	sdir := d.sessionDir(sessionID)
	old := rec.StateSHA256
	rec.StateSHA256, rec.StateSize, rec.StateCreatedAt = "", 0, time.Time{}
	if err := writeSession(sdir, rec); err != nil {
		return fmt.Errorf("delete state: %w", err)
	}
	if err := os.Remove(filepath.Join(sdir, stateName(old))); err != nil {
		return fmt.Errorf("delete state: %w", err)
	}
	return nil
}

// PutFile implements Store. The file's metadata and bytes go into one file, so one
// rename replaces both; the content streams into it.
func (d *Disk) PutFile(ctx context.Context, f *File, content io.Reader, size int64) error {
	if !validIDs(f.ID, f.SessionID) {
		return ErrNotFound
	}
	l := d.lock(f.SessionID)
	l.Lock()
	defer l.Unlock()
	if _, err := d.readSession(f.SessionID); err != nil {
		return err
	}
	rec := newFileRecord(f)
	rec.Size = size
	rec.CreatedAt = normTime(f.CreatedAt, time.Now())
	hdr, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("put file: %w", err)
	}
	dir := filepath.Join(d.sessionDir(f.SessionID), filesDir)
	if err := writeAtomicFrom(dir, f.ID, io.MultiReader(bytes.NewReader(append(hdr, '\n')), exactly(content, size))); err != nil {
		return fmt.Errorf("put file: %w", err)
	}
	f.Size, f.CreatedAt = rec.Size, rec.CreatedAt
	return nil
}

// File implements Store.
func (d *Disk) File(ctx context.Context, sessionID, fileID string) (*File, []byte, error) {
	if !validIDs(sessionID, fileID) {
		return nil, nil, ErrNotFound
	}
	l := d.lock(sessionID)
	l.RLock()
	defer l.RUnlock()
	b, err := os.ReadFile(filepath.Join(d.sessionDir(sessionID), filesDir, fileID))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, ErrNotFound
	} else if err != nil {
		return nil, nil, fmt.Errorf("read file: %w", err)
	}
	hdr, data, ok := bytes.Cut(b, []byte{'\n'})
	if !ok {
		return nil, nil, fmt.Errorf("read file %s: no header", fileID)
	}
	rec, err := decodeFileHeader(hdr)
	if err != nil {
		return nil, nil, fmt.Errorf("read file %s: %w", fileID, err)
	}
	if rec.Size != int64(len(data)) {
		return nil, nil, fmt.Errorf("read file %s: %d bytes, header says %d", fileID, len(data), rec.Size)
	}
	return rec.file(), data, nil
}

// Files implements Store.
func (d *Disk) Files(ctx context.Context, sessionID string) ([]*File, error) {
	if !validIDs(sessionID) {
		return nil, ErrNotFound
	}
	l := d.lock(sessionID)
	l.RLock()
	defer l.RUnlock()
	if _, err := d.readSession(sessionID); err != nil {
		return nil, err
	}
	dir := filepath.Join(d.sessionDir(sessionID), filesDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list files: %w", err)
	}
	files := []*File{}
	for _, e := range entries {
		if !kiln.ValidID(e.Name()) { // temporary files start with "."
			continue
		}
		rec, err := readFileHeader(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("list files: %s: %w", e.Name(), err)
		}
		files = append(files, rec.file())
	}
	sortFiles(files)
	return files, nil
}

// DeleteFile implements Store.
func (d *Disk) DeleteFile(ctx context.Context, sessionID, fileID string) error {
	if !validIDs(sessionID, fileID) {
		return ErrNotFound
	}
	l := d.lock(sessionID)
	l.Lock()
	defer l.Unlock()
	dir := filepath.Join(d.sessionDir(sessionID), filesDir)
	if err := os.Remove(filepath.Join(dir, fileID)); errors.Is(err, fs.ErrNotExist) {
		return ErrNotFound
	} else if err != nil {
		return fmt.Errorf("delete file: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("delete file: %w", err)
	}
	return nil
}

func readFileHeader(path string) (*fileRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	line, err := bufio.NewReaderSize(f, maxFileHeader).ReadSlice('\n')
	if err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	return decodeFileHeader(line[:len(line)-1])
}

func decodeFileHeader(b []byte) (*fileRecord, error) {
	var rec fileRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("decode header: %w", err)
	}
	return &rec, nil
}

// writeAtomic makes dir/name hold the concatenated parts, or leaves it as it was: the
// parts go to a temporary file in dir that is synced, then renamed over name, and dir
// is synced so that the rename itself survives a crash.
func writeAtomic(dir, name string, parts ...[]byte) error {
	readers := make([]io.Reader, len(parts))
	for i, p := range parts {
		readers[i] = bytes.NewReader(p)
	}
	return writeAtomicFrom(dir, name, io.MultiReader(readers...))
}

// writeAtomicFrom is writeAtomic of what r reads.
func writeAtomicFrom(dir, name string, r io.Reader) (err error) {
	f, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			err = errors.Join(err, ignoreNotExist(os.Remove(tmp)))
		}
	}()
	if _, err := io.Copy(f, r); err != nil {
		return errors.Join(err, f.Close())
	}
	if err := f.Sync(); err != nil {
		return errors.Join(err, f.Close())
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes the entries of dir (creations, renames, removals) durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
