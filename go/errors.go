package accelerator

import (
	"errors"
	"strings"
)

// Code is the ABI's Result: the outcome of every call.
type Code int

// The ABI's Result codes (ABI.md, "Result codes").
const (
	CodeSuccess           Code = 0
	CodeInvalidParam      Code = 1
	CodeNotFound          Code = 2
	CodeNotSupported      Code = 3
	CodeResourceExhausted Code = 4
	CodeOperationFailed   Code = 5
	CodeInternal          Code = 6
)

var codeNames = map[Code]string{
	CodeSuccess:           "RESULT_SUCCESS",
	CodeInvalidParam:      "RESULT_ERROR_INVALID_PARAM",
	CodeNotFound:          "RESULT_ERROR_NOT_FOUND",
	CodeNotSupported:      "RESULT_ERROR_NOT_SUPPORTED",
	CodeResourceExhausted: "RESULT_ERROR_RESOURCE_EXHAUSTED",
	CodeOperationFailed:   "RESULT_ERROR_OPERATION_FAILED",
	CodeInternal:          "RESULT_ERROR_INTERNAL",
}

// String returns the C enumerator's name, e.g. "RESULT_ERROR_NOT_FOUND".
func (c Code) String() string {
	if s, ok := codeNames[c]; ok {
		return s
	}
	return "RESULT_UNKNOWN"
}

// Sentinel errors, one per failing Result code: every *Error matches
// exactly one of them with errors.Is.
var (
	ErrInvalidParam      = errors.New("accelerator: invalid parameter")
	ErrNotFound          = errors.New("accelerator: not found")
	ErrNotSupported      = errors.New("accelerator: not supported")
	ErrResourceExhausted = errors.New("accelerator: resource exhausted")
	ErrOperationFailed   = errors.New("accelerator: operation failed")
	ErrInternal          = errors.New("accelerator: internal error")
)

// Sentinel returns the sentinel error for c (nil for CodeSuccess and for
// codes the ABI does not define).
func (c Code) Sentinel() error {
	switch c {
	case CodeInvalidParam:
		return ErrInvalidParam
	case CodeNotFound:
		return ErrNotFound
	case CodeNotSupported:
		return ErrNotSupported
	case CodeResourceExhausted:
		return ErrResourceExhausted
	case CodeOperationFailed:
		return ErrOperationFailed
	case CodeInternal:
		return ErrInternal
	}
	return nil
}

// Error is a failed call: the Result code, the ABI function that failed,
// and the library's reason (acceleratorGetLastError on the calling thread).
type Error struct {
	Code    Code   // the Result the call returned
	Op      string // the ABI function, e.g. "GetDeviceMetrics"
	Message string // the library's human-readable reason
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.Op + ": " + e.Code.String()
	} else if !strings.HasPrefix(msg, e.Op+":") {
		msg = e.Op + ": " + msg
	}
	return "accelerator: " + msg + " (" + e.Code.String() + ")"
}

// Is reports whether target is the sentinel error of e's code, or an
// *Error with the same code and (when target names one) the same Op.
func (e *Error) Is(target error) bool {
	if s := e.Code.Sentinel(); s != nil && target == s {
		return true
	}
	if t, ok := target.(*Error); ok {
		return t.Code == e.Code && (t.Op == "" || t.Op == e.Op)
	}
	return false
}

func invalid(op, format string) *Error {
	return &Error{Code: CodeInvalidParam, Op: op, Message: op + ": invalid parameter: " + format}
}
