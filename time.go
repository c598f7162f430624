package kiln

import "time"

// TimeFormat is how every timestamp kiln sends is written: RFC 3339, UTC, with
// milliseconds and a Z suffix.
const TimeFormat = "2006-01-02T15:04:05.000Z"

// Timestamp is a time that encodes to JSON in TimeFormat. It lives here, below every
// package that writes a body, so that those building bodies outside package api (the
// dashboard's /stats, which metrics fills) need not import it.
type Timestamp time.Time

// String returns t in UTC, in TimeFormat.
func (t Timestamp) String() string { return time.Time(t).UTC().Format(TimeFormat) }

// MarshalJSON implements json.Marshaler.
func (t Timestamp) MarshalJSON() ([]byte, error) {
	return []byte(`"` + t.String() + `"`), nil
}
