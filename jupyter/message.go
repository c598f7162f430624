package jupyter

import (
	"encoding/json"
	"time"

	"github.com/kilnsh/kiln"
)

// protocolVersion is the kernel messaging protocol version spoken.
const protocolVersion = "5.3"

// timeFormat is how times are written: ISO 8601 in UTC with microseconds, which every
// client parses (Python's strptime takes no more than six digits).
const timeFormat = "2006-01-02T15:04:05.000000Z"

// header is a message's header (and, as parent_header, the header of the message it
// answers).
type header struct {
	MsgID    string `json:"msg_id"`
	MsgType  string `json:"msg_type"`
	Username string `json:"username"`
	Session  string `json:"session"`
	// Date is kept as the client wrote it: clients send an ISO 8601 string, but jupyter_server's
	// gateway client (which nbclient and papermill use through a gateway) sends a number of
	// seconds, and a parent header goes back as it came.
	Date    any    `json:"date"`
	Version string `json:"version"`
}

// message is one kernel message as the WebSocket's JSON carries it.
type message struct {
	Header header `json:"header"`
	// MsgID and MsgType repeat the header's, as Jupyter Server's messages do (jupyter_client's
	// messages carry them, and its gateway client reads them there).
	MsgID        string          `json:"msg_id,omitempty"`
	MsgType      string          `json:"msg_type,omitempty"`
	ParentHeader json.RawMessage `json:"parent_header"`
	Metadata     json.RawMessage `json:"metadata"`
	Content      json.RawMessage `json:"content"`
	Channel      string          `json:"channel"`
	Buffers      []any           `json:"buffers"`

	size int // bytes a queued cell counts for (conn.queueCell)
}

// reply makes a message of msgType on channel answering parent (nil for none).
func reply(parent *message, session, channel, msgType string, content any) *message {
	body, err := json.Marshal(content)
	if err != nil {
		body = []byte("{}")
	}
	m := &message{
		Header: header{MsgID: kiln.NewID(), MsgType: msgType, Username: "kiln", Session: session,
			Date: time.Now().UTC().Format(timeFormat), Version: protocolVersion},
		ParentHeader: json.RawMessage("{}"), Metadata: json.RawMessage("{}"), Content: body,
		Channel: channel, Buffers: []any{},
	}
	m.MsgID, m.MsgType = m.Header.MsgID, m.Header.MsgType
	if parent != nil {
		m.ParentHeader, _ = json.Marshal(parent.Header)
	}
	return m
}

// The contents of the messages read.
type executeRequest struct {
	Code         string `json:"code"`
	Silent       bool   `json:"silent"`
	StoreHistory *bool  `json:"store_history"`
}

type codeRequest struct {
	Code        string `json:"code"`
	CursorPos   int    `json:"cursor_pos"`
	DetailLevel int    `json:"detail_level"`
}

type shutdownRequest struct {
	Restart bool `json:"restart"`
}
