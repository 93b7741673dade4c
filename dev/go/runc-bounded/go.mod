module kafkamirror.dev/build/runc-bounded

go 1.25.0
