# write_if_changed(FILE TEXT): writes TEXT to FILE only when it differs from what FILE holds, so a
# generated source keeps its timestamp (and what depends on it is not rebuilt) while it is the same.
function(write_if_changed file text)
  set(old "")
  if(EXISTS "${file}")
    file(READ "${file}" old)
  endif()
  if(NOT old STREQUAL text)
    file(WRITE "${file}" "${text}")
  endif()
endfunction()
