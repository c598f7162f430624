package store

import "time"

// sessionRecord is a session as the disk store writes it. Byte strings that may not be
// UTF-8 are []byte, which JSON keeps exactly (as base64), so two owners never merge.
type sessionRecord struct {
	ID             string    `json:"id"`
	Owner          []byte    `json:"owner"`
	EntityID       []byte    `json:"entity_id"`
	Creator        []byte    `json:"creator,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	LastUsedAt     time.Time `json:"last_used_at"`
	StateSize      int64     `json:"state_size,omitempty"`
	StateSHA256    string    `json:"state_sha256,omitempty"`
	StateCreatedAt time.Time `json:"state_created_at,omitzero"`
}

func (r *sessionRecord) session(ttl time.Duration) *Session {
	return &Session{
		ID:             r.ID,
		Owner:          string(r.Owner),
		EntityID:       string(r.EntityID),
		Creator:        string(r.Creator),
		CreatedAt:      r.CreatedAt,
		LastUsedAt:     r.LastUsedAt,
		ExpiresAt:      r.LastUsedAt.Add(ttl),
		HasState:       r.StateSHA256 != "",
		StateSize:      r.StateSize,
		StateSHA256:    r.StateSHA256,
		StateCreatedAt: r.StateCreatedAt,
	}
}

// fileRecord is a file's metadata as both stores write it.
type fileRecord struct {
	ID          string    `json:"id"`
	SessionID   string    `json:"session_id"`
	Name        []byte    `json:"name"`
	ContentType string    `json:"content_type"`
	Size        int64     `json:"size"`
	CreatedAt   time.Time `json:"created_at"`
	ReadOnly    bool      `json:"read_only,omitempty"`
}

func newFileRecord(f *File) fileRecord {
	return fileRecord{ID: f.ID, SessionID: f.SessionID, Name: []byte(f.Name), ContentType: f.ContentType, Size: f.Size,
		CreatedAt: f.CreatedAt, ReadOnly: f.ReadOnly}
}

func (r *fileRecord) file() *File {
	return &File{ID: r.ID, SessionID: r.SessionID, Name: string(r.Name), ContentType: r.ContentType, Size: r.Size,
		CreatedAt: r.CreatedAt, ReadOnly: r.ReadOnly}
}
