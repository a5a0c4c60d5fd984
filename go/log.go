package accelerator

/*
#include <stdlib.h>
#include <accelerator.h>

extern void goAcceleratorLog(AcceleratorLogLevel level, char *message);

static void accelerator_go_log_trampoline(AcceleratorLogLevel level, const char *message) {
	goAcceleratorLog(level, (char *)message);
}

static void accelerator_go_set_log(int on) {
	acceleratorSetLogCallback(on ? accelerator_go_log_trampoline : NULL);
}
*/
import "C"

import (
	"sync"
	"unsafe"
)

// LogLevel is the library's log level, most severe first.
type LogLevel int

// Log levels (AcceleratorLogLevel).
const (
	LogError LogLevel = iota
	LogWarn
	LogInfo
	LogDebug
	LogTrace
)

var levelNames = [...]string{"error", "warn", "info", "debug", "trace"}

// String is the name Log accepts: "error", "warn", "info", "debug", "trace".
func (l LogLevel) String() string {
	if l >= 0 && int(l) < len(levelNames) {
		return levelNames[l]
	}
	return "unknown"
}

var (
	logMu      sync.RWMutex
	logHandler func(LogLevel, string)
)

//export goAcceleratorLog
func goAcceleratorLog(level C.AcceleratorLogLevel, message *C.char) {
	logMu.RLock()
	h := logHandler
	logMu.RUnlock()
	if h != nil {
		h(LogLevel(level), C.GoString(message))
	}
}

// SetLogHandler routes the library's log to h (nil restores stderr). The
// threshold still comes from ACCELERATOR_LOG. h runs on whichever thread
// logs, during the library call that logs: it must not block for long,
// and must not call back into this package.
func SetLogHandler(h func(level LogLevel, message string)) {
	logMu.Lock()
	logHandler = h
	logMu.Unlock()
	on := C.int(0)
	if h != nil {
		on = 1
	}
	C.accelerator_go_set_log(on)
}

// Log routes a message into the library's log sink at the given level.
func Log(level LogLevel, message string) error {
	const op = "Log"
	if err := checkString(op, "message", message); err != nil {
		return err
	}
	lv := C.CString(level.String())
	defer C.free(unsafe.Pointer(lv))
	msg := C.CString(message)
	defer C.free(unsafe.Pointer(msg))
	return call(op, func() uint32 { return C.Log(lv, msg) })
}
