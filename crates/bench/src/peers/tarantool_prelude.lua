-- Functions every Tarantool app of the benchmark uses: the workloads' generic statements
-- SELECT COUNT(*) FROM t and DELETE FROM t (space names are the table names in lower case).
function ls_count(name)
  local s = box.space[string.lower(name)]
  if s == nil then error('no space ' .. name) end
  return { { s:len() } }
end

function ls_truncate(name)
  local s = box.space[string.lower(name)]
  if s == nil then error('no space ' .. name) end
  local n = s:len()
  s:truncate()
  return { { n } }
end
