module github.com/accelerator-provider/accelerator/go

go 1.21

require github.com/ebitengine/purego v0.8.4
