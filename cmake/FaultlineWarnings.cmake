# Compiler warnings and sanitizers, applied to every faultline target through faultline_options.
function(faultline_apply_warnings target)
  target_compile_options(${target} INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
      -Wold-style-cast -Wcast-align -Woverloaded-virtual -Wformat=2
      -Wimplicit-fallthrough>
    # GCC 12 false positives in std::string at -O3 (GCC bug 105329); clang has no such option.
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-restrict>)
  if(FAULTLINE_WERROR)
    target_compile_options(${target} INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
  if(FAULTLINE_SANITIZE)
    target_compile_options(${target} INTERFACE
      $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer
        -fno-sanitize-recover=undefined>)
    target_link_options(${target} INTERFACE -fsanitize=address,undefined)
  endif()
endfunction()
