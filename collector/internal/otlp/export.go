package otlp

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// codec is the encoding an export came in, which its reply goes out in.
type codec struct {
	contentType string
	marshal     func(proto.Message) ([]byte, error)
}

func (c codec) reply(w http.ResponseWriter, resp proto.Message) {
	out, err := c.marshal(resp)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", c.contentType)
	w.Write(out)
}

// readExport decodes one OTLP/HTTP export request (protobuf or JSON,
// optionally gzip, at most maxBody bytes) into req. When it fails it has
// answered the request, counted a malformed one in sink where the body was
// at fault, and returns false.
func readExport(w http.ResponseWriter, r *http.Request, maxBody int64, req proto.Message, sink Sink) (codec, bool) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var unmarshal func([]byte, proto.Message) error
	c := codec{contentType: ct}
	switch ct {
	case "application/x-protobuf", "application/protobuf":
		unmarshal, c.marshal = proto.Unmarshal, proto.Marshal
	case "application/json":
		unmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal
		c.marshal = protojson.Marshal
	default:
		http.Error(w, "Content-Type must be application/x-protobuf or application/json", http.StatusUnsupportedMediaType)
		return c, false
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, maxBody)
	enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding")))
	switch enc {
	case "", "identity", "gzip":
	default:
		// Decoding it as plain would count the exporter's batches as
		// garbage; 415 tells it what to send instead.
		http.Error(w, "Content-Encoding must be gzip or identity (none)", http.StatusUnsupportedMediaType)
		return c, false
	}
	bad := func(msg string) (codec, bool) {
		sink.Malformed(1)
		http.Error(w, msg, http.StatusBadRequest)
		return c, false
	}
	if enc == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			return bad("gzip body: " + err.Error())
		}
		defer zr.Close()
		body = io.LimitReader(zr, maxBody+1)
	}
	b, err := io.ReadAll(body)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) || int64(len(b)) > maxBody {
		http.Error(w, fmt.Sprintf("request larger than %d bytes: export smaller batches", maxBody), http.StatusRequestEntityTooLarge)
		return c, false
	}
	if err != nil {
		return bad("read body: " + err.Error())
	}
	if err := unmarshal(b, req); err != nil {
		return bad(fmt.Sprintf("decode %s: %v", req.ProtoReflect().Descriptor().Name(), err))
	}
	return c, true
}
