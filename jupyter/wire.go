package jupyter

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
)

// subprotocolV1 is Jupyter Server's binary framing of kernel messages, which
// JupyterLab 4's client asks for: a count of offsets, the offsets (little-endian
// uint64), then the channel's name and the message's parts (header, parent header,
// metadata, content, buffers), each between two offsets.
const subprotocolV1 = "v1.kernel.websocket.jupyter.org"

// encodeV1 frames m as the v1 subprotocol does.
func encodeV1(m *message) ([]byte, error) {
	head, err := json.Marshal(m.Header)
	if err != nil {
		return nil, err
	}
	parts := [][]byte{[]byte(m.Channel), head, m.ParentHeader, m.Metadata, m.Content}
	n := len(parts) + 1 // an offset where each part starts, and one where the last ends
	offsets := make([]uint64, 0, n)
	at := uint64(8 * (1 + n))
	offsets = append(offsets, at)
	for _, p := range parts {
		at += uint64(len(p))
		offsets = append(offsets, at)
	}
	out := make([]byte, 0, at)
	out = binary.LittleEndian.AppendUint64(out, uint64(n))
	for _, o := range offsets {
		out = binary.LittleEndian.AppendUint64(out, o)
	}
	for _, p := range parts {
		out = append(out, p...)
	}
	return out, nil
}

var errFrame = errors.New("not a v1 kernel message")

// decodeV1 reads a v1 frame into a message; its buffers are dropped (kiln has no comms
// that would read them).
func decodeV1(b []byte) (*message, error) {
	if len(b) < 8 {
		return nil, errFrame
	}
	n := binary.LittleEndian.Uint64(b)
	if n < 6 || n > 1<<16 || uint64(len(b)) < 8*(n+1) {
		return nil, errFrame
	}
	offsets := make([]uint64, n)
	for i := range offsets {
		offsets[i] = binary.LittleEndian.Uint64(b[8*(i+1):])
		if offsets[i] > uint64(len(b)) || (i > 0 && offsets[i] < offsets[i-1]) {
			return nil, errFrame
		}
	}
	// Each part is copied: a message kept (a cell queued) does not hold the whole frame.
	part := func(i int) []byte { return bytes.Clone(b[offsets[i]:offsets[i+1]]) }
	m := &message{Channel: string(part(0)), ParentHeader: part(2), Metadata: part(3), Content: part(4)}
	if err := json.Unmarshal(part(1), &m.Header); err != nil {
		return nil, errFrame
	}
	return m, nil
}
