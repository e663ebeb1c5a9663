module kvgpu/bench/gopeer

go 1.26
