package bus

import (
	"encoding/json"
	"errors"
	"fmt"
)

// FetchResultHeader is the NATS header that carries a FetchResult's fields
// (JSON, without the payload) when the message data is the payload itself.
const FetchResultHeader = "Riftflow-Fetch-Result"

// EncodeFetchResult is r as a NATS message's data and headers.
//
//   - With an inline payload (r.Payload set), data is the payload as the
//     fetcher kept it (Riot's gzip bytes, 20–200 KB for a match or
//     timeline) and the header FetchResultHeader holds every other field
//     as JSON (a few hundred bytes; JSON escapes every control character,
//     so the value is one header line). Nothing is base64-encoded, so the
//     message is a third smaller and neither side spends CPU on base64.
//   - Otherwise (a failure, or a payload in the object store) data is r as
//     JSON and there is no header: the form every FetchResult had before.
//
// Dead letters and their replay keep the headers, so either form survives
// the dead-letter stream.
func EncodeFetchResult(r FetchResult) (data []byte, header map[string]string, err error) {
	if len(r.Payload) == 0 {
		data, err = json.Marshal(r)
		return data, nil, err
	}
	payload := r.Payload
	r.Payload = nil
	meta, err := json.Marshal(r)
	if err != nil {
		return nil, nil, err
	}
	return payload, map[string]string{FetchResultHeader: string(meta)}, nil
}

// DecodeFetchResult reads a FetchResult message of either form of
// EncodeFetchResult from its headers and data. With the header, the
// returned Payload aliases data. Errors: the header or the data is not a
// FetchResult's JSON, or the header's form carries a payload in its JSON.
func DecodeFetchResult(header map[string][]string, data []byte) (FetchResult, error) {
	var r FetchResult
	meta := header[FetchResultHeader]
	if len(meta) == 0 {
		if err := json.Unmarshal(data, &r); err != nil {
			return FetchResult{}, fmt.Errorf("fetch result: %w", err)
		}
		return r, nil
	}
	if err := json.Unmarshal([]byte(meta[0]), &r); err != nil {
		return FetchResult{}, fmt.Errorf("fetch result header %s: %w", FetchResultHeader, err)
	}
	if len(r.Payload) > 0 {
		return FetchResult{}, errors.New("fetch result: payload both in the header and the data")
	}
	r.Payload = data
	return r, nil
}
