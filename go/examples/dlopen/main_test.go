package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// libPath is the path the example loads: $ACCELERATOR_LIB, else the
// in-repo stub build.
func libPath(t *testing.T) string {
	lib := os.Getenv("ACCELERATOR_LIB")
	if lib == "" {
		lib = filepath.Join("..", "..", "..", "build", "libaccelerator.so")
	}
	abs, err := filepath.Abs(lib)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("no library at %s (run make first): %v", abs, err)
	}
	return abs
}

// build compiles the example into a temporary directory.
func build(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "dlopen")
	goTool := os.Getenv("GO")
	if goTool == "" {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		if p, err := exec.LookPath("go"); err == nil {
			goTool = p
		}
	}
	cmd := exec.Command(goTool, "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func run(t *testing.T, bin string, env []string, args ...string) (string, string, int) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

func TestListsDevicesAndMetrics(t *testing.T) {
	bin, lib := build(t), libPath(t)
	state := []string{"ACCELERATOR_STATE_DIR=" + t.TempDir()}
	out, errOut, code := run(t, bin, state, lib)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.HasPrefix(out, "vendor stub, ABI version 1, 4 device(s)\n") {
		t.Fatalf("header: %q", out)
	}
	for _, uuid := range []string{"stub-device-0", "stub-device-1", "stub-device-2", "stub-device-3"} {
		// Each device appears twice: in the device table and the metrics table.
		if strings.Count(out, uuid+" ") != 2 {
			t.Errorf("%s not listed with its metrics:\n%s", uuid, out)
		}
	}
	if !strings.Contains(out, "STUB") || !strings.Contains(out, "MEM_TOTAL") {
		t.Errorf("output:\n%s", out)
	}

	// dlclose then dlopen again, three times over.
	out, errOut, code = run(t, bin, state, "-repeat", "3", lib)
	if code != 0 || strings.Count(out, "vendor stub") != 3 {
		t.Fatalf("-repeat 3: exit %d: %s\n%s", code, errOut, out)
	}

	// More devices through the environment: nothing is cached across loads.
	out, _, code = run(t, bin, append(state, "ACCELERATOR_STUB_DEVICES=2"), lib)
	if code != 0 || !strings.Contains(out, "2 device(s)") || strings.Contains(out, "stub-device-2") {
		t.Fatalf("ACCELERATOR_STUB_DEVICES=2: exit %d\n%s", code, out)
	}
}

func TestErrors(t *testing.T) {
	bin, lib := build(t), libPath(t)
	_, errOut, code := run(t, bin, nil, filepath.Join(t.TempDir(), "missing.so"))
	if code != 1 || !strings.Contains(errOut, "cannot load") {
		t.Fatalf("missing library: exit %d: %s", code, errOut)
	}
	_, errOut, code = run(t, bin, []string{"ACCELERATOR_VENDOR=no-such-vendor"}, lib)
	if code != 1 || !strings.Contains(errOut, "RESULT_ERROR_INVALID_PARAM") ||
		!strings.Contains(errOut, "no-such-vendor") {
		t.Fatalf("bad vendor: exit %d: %s", code, errOut)
	}
	if _, _, code = run(t, bin, nil); code != 2 {
		t.Fatalf("no argument: exit %d", code)
	}
}
