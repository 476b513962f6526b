package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// templateDir returns a data directory initialised for info's binary,
// creating it on first use. Initialising costs about two seconds; copying the
// template costs a few tens of milliseconds. Concurrent test binaries each
// build into a private folder and rename it into place: the first rename
// wins, the others throw theirs away.
func templateDir(ctx context.Context, info binaryInfo) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	sum := sha256.Sum256([]byte(info.path + "\x00" + info.version + "\x00" + mariadbLogFileSize + "\x00v1"))
	root := filepath.Join(base, "holdtime", "testenv")
	final := filepath.Join(root, string(info.flavor)+"-"+info.version+"-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(filepath.Join(final, "ready")); err == nil {
		return filepath.Join(final, "data"), nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("testenv: template cache: %w", err)
	}
	tmp, err := os.MkdirTemp(root, "building-")
	if err != nil {
		return "", fmt.Errorf("testenv: template cache: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if err := initDataDir(ctx, info, filepath.Join(tmp, "data")); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, "ready"), nil, 0o644); err != nil {
		return "", fmt.Errorf("testenv: template cache: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		// Lost the race to another binary, or a stale half-built folder
		// without "ready" is in the way.
		if _, statErr := os.Stat(filepath.Join(final, "ready")); statErr != nil {
			_ = os.RemoveAll(final)
			if err := os.Rename(tmp, final); err != nil {
				return "", fmt.Errorf("testenv: template cache: %w", err)
			}
		}
	}
	return filepath.Join(final, "data"), nil
}

// initDataDir creates a new data directory with a root account that has no
// password (the server only ever listens on loopback and a private socket).
func initDataDir(ctx context.Context, info binaryInfo, data string) error {
	var cmd *exec.Cmd
	switch info.flavor {
	case MariaDB:
		tool, err := findInstallDB(info.path)
		if err != nil {
			return err
		}
		args := []string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal",
			"--skip-test-db", "--skip-name-resolve", "--innodb-log-file-size=" + mariadbLogFileSize}
		if os.Geteuid() == 0 {
			args = append(args, "--user=root")
		}
		cmd = exec.CommandContext(ctx, tool, args...)
	default:
		args := []string{"--no-defaults", "--initialize-insecure", "--datadir=" + data}
		if os.Geteuid() == 0 {
			args = append(args, "--user=root")
		}
		cmd = exec.CommandContext(ctx, info.path, args...)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		if len(out) > 4000 {
			out = out[len(out)-4000:]
		}
		return fmt.Errorf("testenv: initialise data directory with %s: %w\n%s", cmd.Path, err, out)
	}
	return nil
}

// findInstallDB finds mariadb-install-db next to the server or on PATH.
func findInstallDB(server string) (string, error) {
	dir := filepath.Dir(server)
	for _, name := range []string{"mariadb-install-db", "mysql_install_db"} {
		for _, cand := range []string{
			filepath.Join(dir, name),
			filepath.Join(filepath.Dir(dir), "bin", name),
			filepath.Join(filepath.Dir(dir), "scripts", name),
		} {
			if _, err := os.Stat(cand); err == nil {
				return cand, nil
			}
		}
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("testenv: mariadb-install-db not found next to %s or on PATH: %w; %s", server, ErrNotInstalled, installHint)
}

// copyDir copies a data directory; only regular files and folders occur.
func copyDir(src, dst string) error {
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		if strings.HasSuffix(d.Name(), ".sock") || !d.Type().IsRegular() {
			return nil
		}
		return copyFile(path, target)
	})
	if err != nil {
		return fmt.Errorf("testenv: copy data directory: %w", err)
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o660)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
