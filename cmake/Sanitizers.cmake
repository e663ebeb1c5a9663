# One switch for sanitizer builds: -DKVGPU_SANITIZE=address,undefined or -DKVGPU_SANITIZE=thread.
if(KVGPU_SANITIZE)
  set(_flags -fsanitize=${KVGPU_SANITIZE} -fno-omit-frame-pointer)
  if(KVGPU_SANITIZE MATCHES "undefined")
    list(APPEND _flags -fno-sanitize-recover=undefined)
  endif()
  add_compile_options(${_flags})
  add_link_options(-fsanitize=${KVGPU_SANITIZE})
endif()
