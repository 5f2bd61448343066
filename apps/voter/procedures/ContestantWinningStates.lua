-- ContestantWinningStates(contestant_number, max): the states this contestant leads, most
-- votes first, at most max rows, in a table (state VARCHAR, num_votes BIGINT), as VoltDB's
-- Voter example's class means to answer. A state's leader is its contestant with the most
-- votes, the lowest number among equals; states with equal votes keep alphabetical order.
-- (The published Java casts Object[] to Result[] and so fails on every call with a
-- ClassCastException; this is the answer its code describes. With no row the columns'
-- types cannot be told from values, and both are VARCHAR.) Multi-partition.
local by_state = sql [[SELECT contestant_number, state, SUM(num_votes) AS num_votes
  FROM v_votes_by_contestant_number_state
 GROUP BY contestant_number, state
 ORDER BY 2 ASC, 3 DESC, 1 ASC]]

return function(contestant_number, max)
  local won = {}
  local state = nil
  for row in by_state:query():rows() do
    -- Rows come by state, leader first: only a state's first row counts.
    if row.state ~= state then
      state = row.state
      if row.contestant_number == contestant_number then
        won[#won + 1] = row
      end
    end
  end
  table.sort(won, function(a, b)
    if a.num_votes ~= b.num_votes then return a.num_votes > b.num_votes end
    return a.state < b.state
  end)
  local rows = {}
  for i = 1, math.min(#won, max) do
    rows[i] = { won[i].state, won[i].num_votes }
  end
  return result_table({ "state", "num_votes" }, rows)
end
