-- GetStateHeatmap(): two tables, as VoltDB's Voter example's class answers for its live
-- map: each state's leading contestants (STATE, CONTESTANT_NUMBER, NUM_VOTES; every
-- contestant tied for the most votes in a state, as RANK() = 1 gives), and each
-- contestant's total votes (CONTESTANT_NUMBER and the sum, column C2). Rows in no set
-- order, as the Java's queries have no ORDER BY. Multi-partition.
local by_state = sql [[SELECT state, contestant_number, SUM(num_votes) AS num_votes
  FROM v_votes_by_contestant_number_state
 GROUP BY state, contestant_number
 ORDER BY state, num_votes DESC, contestant_number]]
local totals = sql [[SELECT contestant_number, SUM(num_votes) AS c2
  FROM v_votes_by_contestant_number_state
 GROUP BY contestant_number]]

return function()
  local leaders = {}
  local state, best = nil, nil
  for row in by_state:query():rows() do
    -- Rows come by state, most votes first: keep the first and those tied with it.
    if row.state ~= state then
      state, best = row.state, row.num_votes
    end
    if row.num_votes == best then
      leaders[#leaders + 1] = { row.state, row.contestant_number, row.num_votes }
    end
  end
  return result_table({ "STATE", "CONTESTANT_NUMBER", "NUM_VOTES" }, leaders), totals:query()
end
