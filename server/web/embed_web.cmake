# Writes OUT: a C++ file holding the dashboard's files (server/web/*.html,
# *.js, *.css) for the scheduler to serve. Run at build time:
#   cmake -DWEB_DIR=... -DOUT=... -P embed_web.cmake
file(GLOB files "${WEB_DIR}/*.html" "${WEB_DIR}/*.js" "${WEB_DIR}/*.css")
list(SORT files)
set(body "")
foreach(f ${files})
  get_filename_component(name ${f} NAME)
  get_filename_component(ext ${f} LAST_EXT)
  if(ext STREQUAL ".html")
    set(type "text/html; charset=utf-8")
  elseif(ext STREQUAL ".js")
    set(type "text/javascript; charset=utf-8")
  else()
    set(type "text/css; charset=utf-8")
  endif()
  file(READ ${f} text)
  string(FIND "${text}" ")xl_web\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${f} contains the raw-string delimiter )xl_web\"")
  endif()
  string(APPEND body "      {\"/${name}\", {\"${type}\", R\"xl_web(${text})xl_web\"}},\n")
endforeach()
file(WRITE ${OUT}.tmp
"// Generated from server/web/ by server/web/embed_web.cmake.\n"
"#include \"server/service/http_gateway.h\"\n"
"namespace xl::service {\n"
"const std::map<std::string, WebAsset>& WebAssets() {\n"
"  static const auto* kAssets = new std::map<std::string, WebAsset>{\n"
"${body}  };\n"
"  return *kAssets;\n"
"}\n"
"}  // namespace xl::service\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUT}.tmp ${OUT})
