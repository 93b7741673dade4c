module kafkamirror.dev/build/pause

go 1.25.0
