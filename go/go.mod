module github.com/accelerator-provider/accelerator/go

go 1.21
