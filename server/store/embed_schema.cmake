# Writes OUT: a C++ file holding every schema/NNNN_name.sql as a Migration.
# Run at build time: cmake -DSCHEMA_DIR=... -DOUT=... -P embed_schema.cmake
file(GLOB files "${SCHEMA_DIR}/[0-9][0-9][0-9][0-9]_*.sql")
list(SORT files)
set(body "")
foreach(f ${files})
  get_filename_component(name ${f} NAME_WE)
  string(SUBSTRING ${name} 0 4 num)
  math(EXPR version "${num}")
  file(READ ${f} sql)
  string(APPEND body "    {${version}, \"${name}\", R\"xl_sql(${sql})xl_sql\"},\n")
endforeach()
file(WRITE ${OUT}.tmp
"// Generated from schema/*.sql by server/store/embed_schema.cmake.\n"
"#include \"server/store/migrator.h\"\n"
"namespace xl::store {\n"
"const std::vector<Migration>& SchemaMigrations() {\n"
"  static const auto* kMigrations = new std::vector<Migration>{\n"
"${body}  };\n"
"  return *kMigrations;\n"
"}\n"
"}  // namespace xl::store\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUT}.tmp ${OUT})
