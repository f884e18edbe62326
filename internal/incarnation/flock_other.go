//go:build !unix

package incarnation

import "os"

func lock(*os.File) error { return ErrUnsupported }

func tryLock(*os.File) (bool, error) { return false, nil }
